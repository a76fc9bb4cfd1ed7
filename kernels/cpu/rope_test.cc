#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/rope.h"
#include "kernels/cpu/test_util.h"

namespace tpserve::kernels::cpu {
namespace {

using testing::BitEqual;
using testing::kUnitRoundoff;
using testing::RandomVector;

// Each output is x0 * c -/+ x1 * s with c, s rounded from float64 (u relative each), one product
// rounding and the FMA's final rounding: |err| <= 4 u (|x0| + |x1|). We bound by 4 u * 2 max|x|.
constexpr double kAbsTol = 4.0 * kUnitRoundoff * 2.0 * 2.0;  // inputs in [-2, 2]

void CheckAgainstReference(const RopeParams& params, int64_t m, int64_t n_heads, ThreadPool* pool) {
  const RopeTable table(params);
  const int64_t d = params.head_dim;
  std::vector<float> x = RandomVector(m * n_heads * d, 3 + d, -2, 2);  // [m, n_heads, d]
  std::vector<int32_t> pos(m);                                         // [m]
  for (int64_t r = 0; r < m; ++r) pos[r] = static_cast<int32_t>((r * 7919) % 20000);
  std::vector<float> ref = x;
  ApplyRope(table, x.data(), n_heads * d, pos.data(), m, n_heads, pool);
  reference::Rope(params, ref.data(), pos.data(), m, n_heads);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], ref[i], kAbsTol) << "d=" << d << " " << i;
}

TEST(RopeTest, MatchesReferenceBothLayouts) {
  ThreadPool pool(2);
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox}) {
    for (int64_t d : {2, 6, 18, 34, 64, 128}) {
      RopeParams p;
      p.head_dim = d;
      p.theta = 100000.0;
      p.layout = layout;
      p.cached_positions = 1000;  // positions above use the uncached path
      for (int64_t m : {1, 3, 17, 63}) CheckAgainstReference(p, m, 9, &pool);
    }
  }
}

TEST(RopeTest, MatchesReferenceWithScaling) {
  RopeParams p;
  p.head_dim = 128;
  p.theta = 500000.0;
  p.scaling = RopeScaling::kLlama3;
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 8192;
  CheckAgainstReference(p, 17, 3, nullptr);
  p.layout = RopeLayout::kNeox;
  p.scaling = RopeScaling::kLinear;
  p.factor = 4.0;
  CheckAgainstReference(p, 17, 3, nullptr);
}

TEST(RopeTest, Llama3FrequenciesKeepHighAndDivideLow) {
  RopeParams p;
  p.head_dim = 128;
  p.theta = 500000.0;
  p.scaling = RopeScaling::kLlama3;
  p.factor = 8.0;
  RopeParams plain = p;
  plain.scaling = RopeScaling::kNone;
  const RopeTable scaled(p), unscaled(plain);
  EXPECT_EQ(scaled.inv_freq()[0], unscaled.inv_freq()[0]);               // wavelength 2π
  EXPECT_DOUBLE_EQ(scaled.inv_freq()[63], unscaled.inv_freq()[63] / 8);  // longest wavelength
}

TEST(RopeTest, PositionZeroIsIdentityAndPairsRotate) {
  RopeParams p;
  p.head_dim = 4;
  p.theta = 10000.0;
  const RopeTable table(p);
  std::vector<float> x = {1, 2, 3, 4};
  const int32_t zero = 0;
  ApplyRope(table, x.data(), 4, &zero, 1, 1);
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  // Interleaved, pos 1, pair 0 has inv_freq 1: (1, 0) -> (cos 1, sin 1).
  std::vector<float> y = {1, 0, 0, 0};
  const int32_t one = 1;
  ApplyRope(table, y.data(), 4, &one, 1, 1);
  EXPECT_FLOAT_EQ(y[0], std::cos(1.0));
  EXPECT_FLOAT_EQ(y[1], std::sin(1.0));
  // Neox: pair 0 is (0, 2).
  p.layout = RopeLayout::kNeox;
  const RopeTable neox(p);
  std::vector<float> z = {1, 0, 0, 0};
  ApplyRope(neox, z.data(), 4, &one, 1, 1);
  EXPECT_FLOAT_EQ(z[0], std::cos(1.0));
  EXPECT_FLOAT_EQ(z[2], std::sin(1.0));
  EXPECT_EQ(z[1], 0.0f);
}

// Row r of a batch equals the same row rotated alone; a strided (fused QKV) buffer only has its
// first n_heads * head_dim columns of each row touched.
TEST(RopeTest, BatchInvariantAndStrided) {
  RopeParams p;
  p.head_dim = 64;
  p.cached_positions = 64;
  const RopeTable table(p);
  const int64_t m = 200, n_heads = 9, stride = (9 + 2 * 3) * 64;  // [m, 15 heads, 64]
  const std::vector<float> x0 = RandomVector(m * stride, 9);
  std::vector<int32_t> pos(m);
  for (int64_t r = 0; r < m; ++r) pos[r] = static_cast<int32_t>(r * 3);
  std::vector<float> batch = x0;
  ThreadPool pool(2);
  ApplyRope(table, batch.data(), stride, pos.data(), m, n_heads, &pool);
  for (int64_t r = 0; r < m; ++r) {
    std::vector<float> one(x0.begin() + r * stride, x0.begin() + (r + 1) * stride);
    ApplyRope(table, one.data(), stride, &pos[r], 1, n_heads);
    ASSERT_TRUE(BitEqual(&batch[r * stride], one.data(), stride)) << r;
    ASSERT_TRUE(BitEqual(&batch[r * stride + n_heads * 64], &x0[r * stride + n_heads * 64],
                         stride - n_heads * 64));
  }
}

}  // namespace
}  // namespace tpserve::kernels::cpu
