#include "kernels/cuda/embedding.cuh"

#include "kernels/cuda/launch.cuh"

namespace tpserve::cuda {
namespace {

// One block per output row (grid-stride over rows); the block's threads stride over the row.
// table: [vocab, d] bf16; ids: [m]; out: [m, d] f32. 64-bit offsets: vocab * d passes 2^31.
__global__ void EmbeddingGatherKernel(const __nv_bfloat16* __restrict__ table,
                                      const int32_t* __restrict__ ids, int64_t m, int64_t d,
                                      float* __restrict__ out) {
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const __nv_bfloat16* src = table + static_cast<int64_t>(ids[r]) * d;  // [d]
    float* dst = out + r * d;                                             // [d]
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) dst[e] = __bfloat162float(src[e]);
  }
}

}  // namespace

cudaError_t LaunchEmbeddingGather(const __nv_bfloat16* table, const int32_t* ids, int64_t m,
                                  int64_t d, float* out, cudaStream_t stream) {
  if (m < 0 || d < 0) return cudaErrorInvalidValue;
  if (m == 0 || d == 0) return cudaSuccess;
  EmbeddingGatherKernel<<<launch::RowBlocks(m), launch::kThreads, 0, stream>>>(table, ids, m, d,
                                                                               out);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
