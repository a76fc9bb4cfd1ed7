#include "kernels/cuda/add.cuh"

#include "kernels/cuda/launch.cuh"

namespace tpserve::cuda {
namespace {

// y, x: [n]. One correctly rounded f32 addition per element.
__global__ void AddKernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  for (int64_t i = launch::FirstItem(); i < n; i += launch::ItemStride()) {
    y[i] += x[i];
  }
}

}  // namespace

cudaError_t LaunchAdd(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  AddKernel<<<launch::ElementBlocks(n), launch::kThreads, 0, stream>>>(y, x, n);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
