#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/softmax.h"
#include "kernels/cpu/test_util.h"

namespace tpserve::kernels::cpu {
namespace {

using testing::BitEqual;
using testing::kUnitRoundoff;
using testing::RandomVector;

// The sum of n positive terms runs in 8 lanes of ceil(n/8) terms plus 3 horizontal adds:
// relative error <= (n/8 + 3) u; each exp adds <= 2 ulp, the reciprocal and product 2 more.
double SumRelTol(int64_t n) { return (static_cast<double>(n) / 8.0 + 8.0) * kUnitRoundoff; }

TEST(SoftmaxTest, MatchesReference) {
  ThreadPool pool(2);
  for (int64_t n : {1, 3, 17, 63, 577, 1536, 49152}) {
    const int64_t m = 3;
    const std::vector<float> x = RandomVector(m * n, 1 + n, -15, 15);  // [m, n] logits
    std::vector<float> p(m * n), ref(m * n), lp(m * n), lref(m * n);
    Softmax(x.data(), p.data(), m, n, &pool);
    LogSoftmax(x.data(), lp.data(), m, n, &pool);
    reference::Softmax(x.data(), ref.data(), m, n);
    reference::LogSoftmax(x.data(), lref.data(), m, n);
    for (int64_t i = 0; i < m * n; ++i) {
      const int64_t r = i / n;
      const float mx = *std::max_element(x.begin() + r * n, x.begin() + (r + 1) * n);
      // x - max is rounded in float (as in every f32 softmax): an absolute error of
      // |x - max| * u in the exponent, i.e. that much relative error in the probability.
      const double rel = SumRelTol(n) + std::fabs(static_cast<double>(x[i]) - mx) * kUnitRoundoff;
      ASSERT_NEAR(p[i], ref[i], rel * ref[i] + 1e-38) << "n=" << n << " " << i;
      // Absolute: x - max - log(sum), |x - max| <= 30 and log(sum) <= 11: a few ulp of 41,
      // plus the relative error of the sum.
      ASSERT_NEAR(lp[i], lref[i], 4 * 41.0 * 2 * kUnitRoundoff + SumRelTol(n))
          << "n=" << n << " " << i;
    }
  }
}

TEST(SoftmaxTest, InPlaceNegInfAndLargeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {1000.0f, -inf, 1000.0f, 999.0f};
  std::vector<float> lx = x;
  Softmax(x.data(), x.data(), 1, 4);
  EXPECT_EQ(x[1], 0.0f);
  EXPECT_NEAR(x[0], 1.0 / (2.0 + std::exp(-1.0)), 1e-7);
  EXPECT_EQ(x[0], x[2]);
  LogSoftmax(lx.data(), lx.data(), 1, 4);
  EXPECT_EQ(lx[1], -inf);
  EXPECT_NEAR(lx[0], -std::log(2.0 + std::exp(-1.0)), 1e-4);
}

TEST(SoftmaxTest, BatchAndThreadInvariant) {
  const int64_t m = 5, n = 49152;
  const std::vector<float> x = RandomVector(m * n, 7, -10, 10);  // [m, vocab]
  std::vector<float> batch(m * n), one(n), lbatch(m * n), lone(n);
  ThreadPool pool(2);
  Softmax(x.data(), batch.data(), m, n, &pool);
  LogSoftmax(x.data(), lbatch.data(), m, n, &pool);
  for (int64_t r = 0; r < m; ++r) {
    Softmax(&x[r * n], one.data(), 1, n);
    LogSoftmax(&x[r * n], lone.data(), 1, n);
    ASSERT_TRUE(BitEqual(&batch[r * n], one.data(), n)) << r;
    ASSERT_TRUE(BitEqual(&lbatch[r * n], lone.data(), n)) << r;
  }
}

}  // namespace
}  // namespace tpserve::kernels::cpu
