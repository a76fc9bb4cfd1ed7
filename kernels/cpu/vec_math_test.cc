#include "kernels/cpu/vec_math.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace tpserve::kernels::cpu {
namespace {

// Distance in units in the last place between two finite floats of the same sign.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<int64_t>(ia) - ib);
}

// Exp against the correctly rounded float of the float64 exp, over the normal output range.
TEST(VecMathTest, ExpWithinTwoUlp) {
  int64_t worst = 0;
  for (float x = -87.0f; x < 88.7f; x += 0.0007f) {
    const float got = ExpScalar(x);
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    worst = std::max(worst, UlpDistance(got, want));
  }
  EXPECT_LE(worst, 2);
}

TEST(VecMathTest, ExpSpecialValues) {
  EXPECT_EQ(ExpScalar(0.0f), 1.0f);
  EXPECT_EQ(ExpScalar(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(ExpScalar(-200.0f), 0.0f);
  EXPECT_EQ(ExpScalar(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(ExpScalar(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(ExpScalar(std::numeric_limits<float>::quiet_NaN())));
  // Just below overflow and in the denormal range: still close to the true value.
  EXPECT_LE(
      UlpDistance(ExpScalar(88.72f), static_cast<float>(std::exp(static_cast<double>(88.72f)))), 2);
  const float tiny = ExpScalar(-100.0f);
  EXPECT_NEAR(tiny, std::exp(-100.0), 2e-45);
}

TEST(VecMathTest, HorizontalSumAndTailMask) {
  const __m256 v = _mm256_setr_ps(1, 2, 3, 4, 5, 6, 7, 8);
  EXPECT_EQ(HorizontalSum(v), 36.0f);
  EXPECT_EQ(HorizontalMax(v), 8.0f);
  float out[8] = {0};
  _mm256_maskstore_ps(out, TailMask(3), v);
  EXPECT_EQ(out[2], 3.0f);
  EXPECT_EQ(out[3], 0.0f);
}

}  // namespace
}  // namespace tpserve::kernels::cpu
