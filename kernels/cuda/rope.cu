#include "kernels/cuda/rope.cuh"

#include "kernels/cuda/launch.cuh"

namespace tpserve::cuda {
namespace {

// One thread per rotary pair (row r, head h, pair i), flattened in that order. x rows: see
// RopeArgs; cos_table, sin_table: [positions, half]. __fmul_rn / __fmaf_rn are never contracted or
// reassociated, so the result is the CPU kernel's bit for bit:
//   a' = fma(-b, sin, a * cos), b' = fma(a, sin, b * cos).
__global__ void RopeKernel(float* x, int64_t row_stride, const int32_t* __restrict__ pos, int64_t m,
                           int64_t n_heads, int64_t half, const float* __restrict__ cos_table,
                           const float* __restrict__ sin_table, bool neox) {
  const int64_t pairs_per_row = n_heads * half;
  const int64_t total = m * pairs_per_row;
  for (int64_t idx = launch::FirstItem(); idx < total; idx += launch::ItemStride()) {
    const int64_t r = idx / pairs_per_row;
    const int64_t j = idx - r * pairs_per_row;
    const int64_t h = j / half;
    const int64_t i = j - h * half;
    float* head = x + r * row_stride + h * 2 * half;  // [head_dim]
    const int64_t t = static_cast<int64_t>(pos[r]) * half + i;
    const float c = cos_table[t];
    const float s = sin_table[t];
    float* pa = head + (neox ? i : 2 * i);
    float* pb = head + (neox ? i + half : 2 * i + 1);
    const float a = *pa;
    const float b = *pb;
    *pa = __fmaf_rn(-b, s, __fmul_rn(a, c));
    *pb = __fmaf_rn(a, s, __fmul_rn(b, c));
  }
}

}  // namespace

cudaError_t LaunchRope(const RopeArgs& args, cudaStream_t stream) {
  if (args.m < 0 || args.n_heads < 0 || args.head_dim <= 0 || args.head_dim % 2 != 0 ||
      args.row_stride < args.n_heads * args.head_dim) {
    return cudaErrorInvalidValue;
  }
  if (args.m == 0 || args.n_heads == 0) return cudaSuccess;
  const int64_t half = args.head_dim / 2;
  const unsigned blocks = launch::ElementBlocks(args.m * args.n_heads * half);
  RopeKernel<<<blocks, launch::kThreads, 0, stream>>>(
      args.x, args.row_stride, args.pos, args.m, args.n_heads, half, args.cos, args.sin, args.neox);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
