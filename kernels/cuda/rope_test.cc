#include "kernels/cuda/rope.cuh"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/cpu/reference/rope.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/cuda_test_util.h"

namespace tpserve::cuda {
namespace {

using kernels::cpu::RopeLayout;
using kernels::cpu::RopeParams;
using kernels::cpu::RopeScaling;
using kernels::cpu::RopeTable;
using testing::DeviceArray;
using testing::RandomFloats;

// Against the float64 reference: each output is x0 * c -/+ x1 * s with c, s rounded from float64
// (u = 2^-24 relative each), one product rounding and the FMA's rounding, so
// |err| <= 4 u (|x0| + |x1|) <= 4 u * 2 * 2 for inputs in [-2, 2] (the CPU kernel's bound).
constexpr double kAbsTol = 4.0 * std::numeric_limits<float>::epsilon() / 2.0 * 2.0 * 2.0;

// Past RopeParams::cached_positions (4096) by default, so the table also holds positions the CPU
// table computes on the fly (the same floats by its contract).
constexpr int32_t kTablePositions = 5000;

RopeParams Llama3Params(RopeLayout layout) {
  RopeParams p;
  p.head_dim = 128;
  p.theta = 500000.0;
  p.layout = layout;
  p.scaling = RopeScaling::kLlama3;
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 8192;
  return p;
}

RopeParams PlainParams(RopeLayout layout, int64_t head_dim) {
  RopeParams p;
  p.head_dim = head_dim;
  p.theta = 10000.0;
  p.layout = layout;
  return p;
}

// Copies heads [first, first + n) of every fused row into a packed [m, n, hd] array.
std::vector<float> Packed(const std::vector<float>& qkv, int64_t m, int64_t row_stride,
                          int64_t first, int64_t n, int64_t hd) {
  std::vector<float> out(m * n * hd);
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(out.data() + r * n * hd, qkv.data() + r * row_stride + first * hd,
                n * hd * sizeof(float));
  }
  return out;
}

// Rotates the q and k heads of fused rows [m, (n_heads + 2 n_kv) * hd] in place on the GPU and
// checks: (1) bit for bit the CPU kernel ApplyRope on the same table (same floats, same FMA
// formula), v untouched; (2) the float64 reference within kAbsTol.
void CheckFusedRows(const RopeParams& params, int64_t m, int64_t n_heads, int64_t n_kv) {
  const RopeTable table(params);
  const int64_t hd = params.head_dim;
  const int64_t half = hd / 2;
  const int64_t row_stride = (n_heads + 2 * n_kv) * hd;
  std::vector<float> cos(kTablePositions * half);  // [kTablePositions, half]
  std::vector<float> sin(kTablePositions * half);  // [kTablePositions, half]
  for (int32_t p = 0; p < kTablePositions; ++p) {
    table.CosSin(p, cos.data() + p * half, sin.data() + p * half);
  }
  std::vector<int32_t> pos(m);  // [m]
  for (int64_t r = 0; r < m; ++r) pos[r] = static_cast<int32_t>((r * 7919 + 1) % kTablePositions);
  pos[0] = 0;
  pos[m - 1] = kTablePositions - 1;
  const std::vector<float> qkv = RandomFloats(m * row_stride, 31 + hd, 2.0f);  // [m, row_stride]

  std::vector<float> expected = qkv;
  kernels::cpu::ApplyRope(table, expected.data(), row_stride, pos.data(), m, n_heads);
  kernels::cpu::ApplyRope(table, expected.data() + n_heads * hd, row_stride, pos.data(), m, n_kv);

  DeviceArray<float> d_qkv(qkv);
  DeviceArray<float> d_cos(cos);
  DeviceArray<float> d_sin(sin);
  DeviceArray<int32_t> d_pos(pos);
  RopeArgs args;
  args.x = d_qkv.data();
  args.row_stride = row_stride;
  args.pos = d_pos.data();
  args.m = m;
  args.n_heads = n_heads;
  args.head_dim = hd;
  args.cos = d_cos.data();
  args.sin = d_sin.data();
  args.neox = params.layout == RopeLayout::kNeox;
  ASSERT_EQ(LaunchRope(args, nullptr), cudaSuccess);  // q heads
  args.x = d_qkv.data() + n_heads * hd;
  args.n_heads = n_kv;
  ASSERT_EQ(LaunchRope(args, nullptr), cudaSuccess);  // k heads
  const std::vector<float> got = d_qkv.Download();

  const char* layout = params.layout == RopeLayout::kNeox ? "neox" : "interleaved";
  for (int64_t i = 0; i < m * row_stride; ++i) {
    ASSERT_EQ(got[i], expected[i]) << layout << " hd=" << hd << " m=" << m << " row "
                                   << i / row_stride << " col " << i % row_stride;
  }
  const std::pair<int64_t, int64_t> parts[] = {{0, n_heads}, {n_heads, n_kv}};  // q, k heads
  for (const auto& [first, n] : parts) {
    std::vector<float> ref = Packed(qkv, m, row_stride, first, n, hd);  // [m, n, hd]
    kernels::cpu::reference::Rope(params, ref.data(), pos.data(), m, n);
    const std::vector<float> mine = Packed(got, m, row_stride, first, n, hd);
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_NEAR(mine[i], ref[i], kAbsTol) << layout << " hd=" << hd << " m=" << m << " at " << i;
    }
  }
}

TEST(RopeTest, Llama3ScalingBothLayouts) {
  TPSERVE_SKIP_WITHOUT_GPU();
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox}) {
    for (int64_t m : {1, 7, 64}) CheckFusedRows(Llama3Params(layout), m, 8, 2);
  }
}

TEST(RopeTest, PlainBothLayoutsOddShapes) {
  TPSERVE_SKIP_WITHOUT_GPU();
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox}) {
    for (int64_t hd : {2, 6, 64}) {  // half = 1, 3 (odd), 32
      for (int64_t m : {1, 7, 64}) {
        CheckFusedRows(PlainParams(layout, hd), m, 9, 3);
        CheckFusedRows(PlainParams(layout, hd), m, 1, 1);
      }
    }
  }
}

// A prefill-sized batch with Llama 3 8B's head counts.
TEST(RopeTest, LargeBatch) {
  TPSERVE_SKIP_WITHOUT_GPU();
  CheckFusedRows(Llama3Params(RopeLayout::kNeox), 2048, 32, 8);
}

// Needs no GPU: nothing is launched.
TEST(RopeTest, EmptyIsNoopAndBadShapesAreInvalid) {
  RopeArgs args;
  args.head_dim = 64;
  args.n_heads = 4;
  args.row_stride = 256;
  EXPECT_EQ(LaunchRope(args, nullptr), cudaSuccess);  // m == 0
  args.m = 1;
  args.head_dim = 63;
  EXPECT_EQ(LaunchRope(args, nullptr), cudaErrorInvalidValue);  // odd head_dim
  args.head_dim = 128;
  EXPECT_EQ(LaunchRope(args, nullptr), cudaErrorInvalidValue);  // row_stride < 4 * 128
}

}  // namespace
}  // namespace tpserve::cuda
