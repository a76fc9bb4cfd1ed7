// Launch geometry and device helpers shared by the element-wise kernels (one thread per
// element: add, fill_random, rope, swiglu) and the row kernels (one block per row: embedding,
// gather_rows, rmsnorm). Internal to kernels/cuda: include only from .cu files.
//
// Every launch uses kThreads threads per block, never a count chosen from the sizes, so a row
// kernel reduces a row the same way in every batch. Past kMaxBlocks blocks the kernels loop
// (grid-stride), so any size that fits int64 runs.
#ifndef TPSERVE_KERNELS_CUDA_LAUNCH_CUH_
#define TPSERVE_KERNELS_CUDA_LAUNCH_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace tpserve::cuda::launch {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;

// Blocks for one thread per item of `n` > 0 (grid-stride past kMaxBlocks * kThreads).
inline unsigned ElementBlocks(int64_t n) {
  return static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// Blocks for one block per row of `rows` > 0 (grid-stride past kMaxBlocks).
inline unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(std::min(rows, kMaxBlocks));
}

// This thread's first item and the grid's stride, for
//   for (int64_t i = FirstItem(); i < n; i += ItemStride()) ...
__device__ __forceinline__ int64_t FirstItem() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t ItemStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// *p = v, rounded to nearest even when p is bf16.
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

}  // namespace tpserve::cuda::launch

#endif  // TPSERVE_KERNELS_CUDA_LAUNCH_CUH_
