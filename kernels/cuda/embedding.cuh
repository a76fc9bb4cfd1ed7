// Embedding gather on the GPU: out[i, :] = float(table[ids[i], :]). Stateless launcher.
#ifndef TPSERVE_KERNELS_CUDA_EMBEDDING_CUH_
#define TPSERVE_KERNELS_CUDA_EMBEDDING_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tpserve::cuda {

// table: [vocab, d] bf16; ids: [m] (device, each in [0, vocab): the caller checks);
// out: [m, d] f32. Returns the launch error (cudaSuccess when enqueued).
cudaError_t LaunchEmbeddingGather(const __nv_bfloat16* table, const int32_t* ids, int64_t m,
                                  int64_t d, float* out, cudaStream_t stream);

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_EMBEDDING_CUH_
