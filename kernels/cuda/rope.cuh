// Rotary position embedding on the GPU, in place on the q or k heads of a fused QKV row, from
// a precomputed cos/sin table (the CPU RopeTable's floats, so both backends rotate by the same
// angles). The rotation matches the CPU kernel: a' = fma(-b, sin, a*cos), b' = fma(a, sin,
// b*cos). Stateless launcher.
#ifndef TPSERVE_KERNELS_CUDA_ROPE_CUH_
#define TPSERVE_KERNELS_CUDA_ROPE_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace tpserve::cuda {

struct RopeArgs {
  float* x = nullptr;      // m rows, row r starting at x + r * row_stride: [n_heads, head_dim]
  int64_t row_stride = 0;  // elements between rows (>= n_heads * head_dim)
  const int32_t* pos = nullptr;  // [m] device, each in [0, table_positions): the caller checks
  int64_t m = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;        // even
  const float* cos = nullptr;  // [table_positions, head_dim / 2] device
  const float* sin = nullptr;  // [table_positions, head_dim / 2] device
  bool neox = false;           // pairs (i, i + head_dim/2) when true, else (2i, 2i+1) (interleaved)
};

cudaError_t LaunchRope(const RopeArgs& args, cudaStream_t stream);

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_ROPE_CUH_
