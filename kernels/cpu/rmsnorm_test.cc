#include "kernels/cpu/rmsnorm.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/rmsnorm.h"
#include "kernels/cpu/test_util.h"

namespace tpserve::kernels::cpu {
namespace {

using testing::BitEqual;
using testing::kUnitRoundoff;
using testing::RandomVector;

// Relative error bound: the sum of squares runs in 16 lanes of ceil(d/16) terms plus a 4-step
// horizontal sum (<= (d/16 + 6) u relative, all terms positive), halved by the square root, plus
// ~5 roundings (division by d, +eps, sqrt, reciprocal, two products). Doubled for margin.
double RelTol(int64_t d) { return 2.0 * (static_cast<double>(d) / 16.0 + 12.0) * kUnitRoundoff; }

TEST(RmsNormTest, MatchesReference) {
  ThreadPool pool(2);
  for (int64_t d : {1, 3, 17, 63, 576, 577, 1536}) {
    for (int64_t m : {1, 5, 130}) {
      const std::vector<float> x = RandomVector(m * d, 1 + d, -3, 3);  // [m, d]
      const std::vector<float> w = RandomVector(d, 2, 0.5f, 1.5f);     // [d]
      std::vector<float> out(m * d), ref(m * d);
      RmsNorm(x.data(), w.data(), 1e-5f, out.data(), m, d, &pool);
      reference::RmsNorm(x.data(), w.data(), 1e-5f, ref.data(), m, d);
      for (int64_t i = 0; i < m * d; ++i) {
        ASSERT_NEAR(out[i], ref[i], RelTol(d) * std::fabs(ref[i]) + 1e-30) << "d=" << d << " " << i;
      }
    }
  }
}

TEST(RmsNormTest, InPlaceAndAddVariant) {
  const int64_t m = 3, d = 577;
  const std::vector<float> x = RandomVector(m * d, 5);      // [m, d]
  const std::vector<float> delta = RandomVector(m * d, 6);  // [m, d]
  const std::vector<float> w = RandomVector(d, 7, 0.5f, 1.5f);
  std::vector<float> expected(m * d), in_place = x;
  RmsNorm(x.data(), w.data(), 1e-6f, expected.data(), m, d);
  RmsNorm(in_place.data(), w.data(), 1e-6f, in_place.data(), m, d);
  EXPECT_TRUE(BitEqual(in_place.data(), expected.data(), m * d));

  std::vector<float> residual = x, sum(m * d), fused_out(m * d), unfused_out(m * d);
  for (int64_t i = 0; i < m * d; ++i) sum[i] = x[i] + delta[i];
  AddRmsNorm(residual.data(), delta.data(), w.data(), 1e-6f, fused_out.data(), m, d);
  RmsNorm(sum.data(), w.data(), 1e-6f, unfused_out.data(), m, d);
  EXPECT_TRUE(BitEqual(residual.data(), sum.data(), m * d));
  EXPECT_TRUE(BitEqual(fused_out.data(), unfused_out.data(), m * d));
}

TEST(RmsNormTest, BatchAndThreadInvariant) {
  const int64_t m = 300, d = 576;  // m * d above the threshold where the pool is used
  const std::vector<float> x = RandomVector(m * d, 8);  // [m, d]
  const std::vector<float> w = RandomVector(d, 9);      // [d]
  std::vector<float> batch(m * d), one(d);
  ThreadPool pool(3);
  RmsNorm(x.data(), w.data(), 1e-5f, batch.data(), m, d, &pool);
  for (int64_t r = 0; r < m; ++r) {
    RmsNorm(&x[r * d], w.data(), 1e-5f, one.data(), 1, d, nullptr);
    ASSERT_TRUE(BitEqual(&batch[r * d], one.data(), d)) << "row " << r;
  }
}

// QK-norm over fused QKV rows: q's 4 heads and k's 1 head of 256 (Gemma 3 270M's shape) and
// an odd head_dim, each head normalised in place as RmsNorm of it alone; v and the rest of the
// row untouched; the same bits across m and threads.
TEST(RmsNormTest, HeadsInPlaceInStridedRows) {
  ThreadPool pool(2);
  for (int64_t head_dim : {256, 17}) {
    const int64_t q_heads = 4, kv_heads = 1;
    const int64_t stride = (q_heads + 2 * kv_heads) * head_dim;  // [q | k | v]
    for (int64_t m : {1, 70}) {
      const std::vector<float> qkv = RandomVector(m * stride, 10 + m, -4, 4);  // [m, stride]
      const std::vector<float> wq = RandomVector(head_dim, 11, 0.5f, 1.5f);
      const std::vector<float> wk = RandomVector(head_dim, 12, 0.5f, 1.5f);
      std::vector<float> got = qkv;
      RmsNormHeads(got.data(), stride, q_heads, head_dim, wq.data(), 1e-6f, m, &pool);
      RmsNormHeads(got.data() + q_heads * head_dim, stride, kv_heads, head_dim, wk.data(), 1e-6f, m,
                   &pool);
      std::vector<float> one(head_dim), ref(head_dim);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t h = 0; h < q_heads + 2 * kv_heads; ++h) {
          const float* in = &qkv[r * stride + h * head_dim];
          const float* out = &got[r * stride + h * head_dim];
          if (h >= q_heads + kv_heads) {  // v
            ASSERT_TRUE(BitEqual(out, in, head_dim)) << "v changed, row " << r;
            continue;
          }
          const float* w = h < q_heads ? wq.data() : wk.data();
          RmsNorm(in, w, 1e-6f, one.data(), 1, head_dim);
          ASSERT_TRUE(BitEqual(out, one.data(), head_dim)) << "row " << r << " head " << h;
          reference::RmsNorm(in, w, 1e-6f, ref.data(), 1, head_dim);
          for (int64_t i = 0; i < head_dim; ++i) {
            ASSERT_NEAR(out[i], ref[i], RelTol(head_dim) * std::fabs(ref[i]) + 1e-30);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tpserve::kernels::cpu
