#include "kernels/cpu/arg_max.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve::kernels::cpu {
namespace {

// The plain loop ArgMax must agree with.
int64_t Reference(const std::vector<float>& x) {
  int64_t best = 0;
  for (int64_t i = 1; i < static_cast<int64_t>(x.size()); ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

TEST(ArgMaxTest, AgreesWithThePlainLoopOnEveryLengthAndPosition) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-30.0f, 30.0f);
  for (int64_t n = 1; n <= 70; ++n) {
    for (int64_t at = 0; at < n; ++at) {
      std::vector<float> x(n);
      for (float& v : x) v = value(rng);
      x[at] = 100.0f;
      ASSERT_EQ(ArgMax(x.data(), n), at) << n;
      ASSERT_EQ(ArgMax(x.data(), n), Reference(x)) << n;
    }
  }
}

TEST(ArgMaxTest, TiesGoToTheFirst) {
  std::vector<float> x(49152, 1.0f);
  EXPECT_EQ(ArgMax(x.data(), 49152), 0);
  x[40000] = 2.0f;
  x[45000] = 2.0f;
  EXPECT_EQ(ArgMax(x.data(), 49152), 40000);
  x[3] = 2.0f;
  EXPECT_EQ(ArgMax(x.data(), 49152), 3);
}

TEST(ArgMaxTest, NanAndInfinitiesAsThePlainLoop) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {
      {nan, 5.0f, 9.0f},             // a row starting with NaN: 0
      {1.0f, nan, 0.5f, nan, 2.0f},  // NaN never wins
      {-inf, -inf, -inf},            // all -inf: the first
      {3.0f, inf, 2.0f, inf},        // +inf wins, the first of them
      {-inf, nan, nan, nan, nan, nan, nan, nan, nan, nan, -inf},
  };
  for (const std::vector<float>& x : rows) {
    EXPECT_EQ(ArgMax(x.data(), static_cast<int64_t>(x.size())), Reference(x));
  }
  std::vector<float> tail(21, -1.0f);
  tail[20] = nan;
  tail[19] = 0.0f;  // the last value before a NaN in the tail
  EXPECT_EQ(ArgMax(tail.data(), 21), 19);
}

}  // namespace
}  // namespace tpserve::kernels::cpu
