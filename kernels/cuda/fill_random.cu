#include "kernels/cuda/fill_random.cuh"

#include <algorithm>

#include "kernels/cpu/hash_uniform.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // larger arrays (up to billions): grid-stride loop

__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// data: [n]. value i = HashUniform(seed, i) * scale rounded to T: the same values the CPU
// backend's FillRandom makes (for bf16 |value| may exceed scale slightly after rounding).
template <typename T>
__global__ void FillRandomKernel(T* __restrict__ data, int64_t n, uint64_t seed, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    Store(data + i, kernels::HashUniform(seed, static_cast<uint64_t>(i)) * scale);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchFillRandom(T* data, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks));
  FillRandomKernel<T><<<blocks, kThreads, 0, stream>>>(data, n, seed, scale);
  return cudaGetLastError();
}

template cudaError_t LaunchFillRandom<float>(float*, int64_t, uint64_t, float, cudaStream_t);
template cudaError_t LaunchFillRandom<__nv_bfloat16>(__nv_bfloat16*, int64_t, uint64_t, float,
                                                     cudaStream_t);

}  // namespace tpserve::cuda
