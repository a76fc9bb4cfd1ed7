// Elementwise y += x in f32 on the GPU. Stateless launcher.
#ifndef TPSERVE_KERNELS_CUDA_ADD_CUH_
#define TPSERVE_KERNELS_CUDA_ADD_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace tpserve::cuda {

// y, x: [n] f32.
cudaError_t LaunchAdd(float* y, const float* x, int64_t n, cudaStream_t stream);

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_ADD_CUH_
