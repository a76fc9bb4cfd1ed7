#include "kernels/cuda/rmsnorm.cuh"

#include "kernels/cuda/launch.cuh"

namespace tpserve::cuda {
namespace {

// launch::kThreads is fixed for every launch (never chosen from m or d), so a row is always
// reduced the same way.
using launch::kThreads;
using launch::Store;
constexpr int kWarps = kThreads / 32;

// Sum of every thread's v, returned to every thread, in a fixed order: a butterfly within each
// warp (all lanes end with the same value), then each thread adds the kWarps warp sums in warp
// order. partial: [kWarps] shared. Must be called by all kThreads threads of the block.
__device__ __forceinline__ float BlockSum(float v, float* partial) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w) total += partial[w];
  __syncthreads();  // partial is rewritten by the next row
  return total;
}

// 1 / sqrt(mean + eps) from a row's sum of squares, as the CPU kernel forms it.
__device__ __forceinline__ float InvRms(float sum_sq, int64_t d, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(d) + eps);
}

// One block per row (grid-stride over rows). Thread t owns elements t, t + kThreads, ... in both
// passes, so out may alias x: each element is read and then written by the same thread.
// x, out: [m, d]; weight: [d].
template <typename OutT>
__global__ void RmsNormKernel(const float* x, const float* __restrict__ weight, float eps,
                              int64_t m, int64_t d, OutT* out) {
  __shared__ float partial[kWarps];
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const float* row = x + r * d;  // [d]
    OutT* dst = out + r * d;       // [d]
    float sum_sq = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += kThreads) sum_sq = fmaf(row[i], row[i], sum_sq);
    const float inv = InvRms(BlockSum(sum_sq, partial), d, eps);
    for (int64_t i = threadIdx.x; i < d; i += kThreads) Store(dst + i, (row[i] * inv) * weight[i]);
  }
}

// As RmsNormKernel, after residual += x (each element written and re-read by the same thread).
// residual, x, out: [m, d]; weight: [d].
template <typename OutT>
__global__ void AddRmsNormKernel(float* residual, const float* x, const float* __restrict__ weight,
                                 float eps, int64_t m, int64_t d, OutT* out) {
  __shared__ float partial[kWarps];
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    float* res = residual + r * d;  // [d]
    const float* in = x + r * d;    // [d]
    OutT* dst = out + r * d;        // [d]
    float sum_sq = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const float v = res[i] + in[i];
      res[i] = v;
      sum_sq = fmaf(v, v, sum_sq);
    }
    const float inv = InvRms(BlockSum(sum_sq, partial), d, eps);
    for (int64_t i = threadIdx.x; i < d; i += kThreads) Store(dst + i, (res[i] * inv) * weight[i]);
  }
}

}  // namespace

template <typename OutT>
cudaError_t LaunchRmsNorm(const float* x, const float* weight, float eps, int64_t m, int64_t d,
                          OutT* out, cudaStream_t stream) {
  if (m < 0 || d < 0) return cudaErrorInvalidValue;
  if (m == 0 || d == 0) return cudaSuccess;
  RmsNormKernel<OutT><<<launch::RowBlocks(m), kThreads, 0, stream>>>(x, weight, eps, m, d, out);
  return cudaGetLastError();
}

template <typename OutT>
cudaError_t LaunchAddRmsNorm(float* residual, const float* x, const float* weight, float eps,
                             int64_t m, int64_t d, OutT* out, cudaStream_t stream) {
  if (m < 0 || d < 0) return cudaErrorInvalidValue;
  if (m == 0 || d == 0) return cudaSuccess;
  AddRmsNormKernel<OutT>
      <<<launch::RowBlocks(m), kThreads, 0, stream>>>(residual, x, weight, eps, m, d, out);
  return cudaGetLastError();
}

template cudaError_t LaunchRmsNorm<float>(const float*, const float*, float, int64_t, int64_t,
                                          float*, cudaStream_t);
template cudaError_t LaunchRmsNorm<__nv_bfloat16>(const float*, const float*, float, int64_t,
                                                  int64_t, __nv_bfloat16*, cudaStream_t);
template cudaError_t LaunchAddRmsNorm<float>(float*, const float*, const float*, float, int64_t,
                                             int64_t, float*, cudaStream_t);
template cudaError_t LaunchAddRmsNorm<__nv_bfloat16>(float*, const float*, const float*, float,
                                                     int64_t, int64_t, __nv_bfloat16*,
                                                     cudaStream_t);

}  // namespace tpserve::cuda
