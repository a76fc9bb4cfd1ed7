#include "kernels/cuda/add.cuh"

#include <algorithm>

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // larger arrays: grid-stride loop

// y, x: [n]. One correctly rounded f32 addition per element.
__global__ void AddKernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] += x[i];
  }
}

}  // namespace

cudaError_t LaunchAdd(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks));
  AddKernel<<<blocks, kThreads, 0, stream>>>(y, x, n);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
