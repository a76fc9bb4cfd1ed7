#include "kernels/cuda/fill_random.cuh"

#include "kernels/cpu/hash_uniform.h"
#include "kernels/cuda/launch.cuh"

namespace tpserve::cuda {
namespace {

// data: [n]. value i = HashUniform(seed, i) * scale rounded to T: the same values the CPU
// backend's FillRandom makes (for bf16 |value| may exceed scale slightly after rounding).
template <typename T>
__global__ void FillRandomKernel(T* __restrict__ data, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = launch::FirstItem(); i < n; i += launch::ItemStride()) {
    launch::Store(data + i, kernels::HashUniform(seed, static_cast<uint64_t>(i)) * scale);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchFillRandom(T* data, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  FillRandomKernel<T>
      <<<launch::ElementBlocks(n), launch::kThreads, 0, stream>>>(data, n, seed, scale);
  return cudaGetLastError();
}

template cudaError_t LaunchFillRandom<float>(float*, int64_t, uint64_t, float, cudaStream_t);
template cudaError_t LaunchFillRandom<__nv_bfloat16>(__nv_bfloat16*, int64_t, uint64_t, float,
                                                     cudaStream_t);

}  // namespace tpserve::cuda
