#include "kernels/cuda/swiglu.cuh"

#include "kernels/cuda/launch.cuh"

namespace tpserve::cuda {
namespace {

// One thread per output element. gate_up: [m, 2f] (gate | up halves); out: [m, f].
// silu(g) * u = (g / (1 + e^-g)) * u in f32, the formula of the CPU kernel and its reference.
// expf and the division are the accurate (not fast-math) versions; e^-g overflowing to inf for
// g < -88 gives g / inf = -0, the right limit.
__global__ void SwiGluKernel(const float* __restrict__ gate_up, int64_t m, int64_t f,
                             __nv_bfloat16* __restrict__ out) {
  const int64_t total = m * f;
  for (int64_t idx = launch::FirstItem(); idx < total; idx += launch::ItemStride()) {
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
  SwiGluKernel<<<launch::ElementBlocks(m * f), launch::kThreads, 0, stream>>>(gate_up, m, f, out);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
