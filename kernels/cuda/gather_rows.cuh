// Row gather on the GPU, for the LM head: out[j, :] = x[rows[j], :]. Stateless launcher.
#ifndef TPSERVE_KERNELS_CUDA_GATHER_ROWS_CUH_
#define TPSERVE_KERNELS_CUDA_GATHER_ROWS_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace tpserve::cuda {

// x: [m, cols] f32; rows: [n_rows] device indices into x; out: [n_rows, cols] f32.
cudaError_t LaunchGatherRows(const float* x, int64_t cols, const int32_t* rows, int64_t n_rows,
                             float* out, cudaStream_t stream);

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_GATHER_ROWS_CUH_
