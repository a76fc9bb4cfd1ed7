#include "kernels/cuda/swiglu.cuh"

#include <algorithm>

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // larger outputs: grid-stride loop

// One thread per output element. gate_up: [m, 2f] (gate | up halves); out: [m, f].
// silu(g) * u = (g / (1 + e^-g)) * u in f32, the formula of the CPU kernel and its reference.
// expf and the division are the accurate (not fast-math) versions; e^-g overflowing to inf for
// g < -88 gives g / inf = -0, the right limit.
__global__ void SwiGluKernel(const float* __restrict__ gate_up, int64_t m, int64_t f,
                             __nv_bfloat16* __restrict__ out) {
  const int64_t total = m * f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t r = idx / f;
    const int64_t i = idx - r * f;
    const float* row = gate_up + r * 2 * f;  // [2f]
    const float g = row[i];
    const float u = row[f + i];
    out[idx] = __float2bfloat16_rn((g / (1.0f + expf(-g))) * u);
  }
}

}  // namespace

cudaError_t LaunchSwiGlu(const float* gate_up, int64_t m, int64_t f, __nv_bfloat16* out,
                         cudaStream_t stream) {
  if (m < 0 || f < 0) return cudaErrorInvalidValue;
  if (m == 0 || f == 0) return cudaSuccess;
  const int64_t total = m * f;
  const auto blocks =
      static_cast<unsigned>(std::min((total + kThreads - 1) / kThreads, kMaxBlocks));
  SwiGluKernel<<<blocks, kThreads, 0, stream>>>(gate_up, m, f, out);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
