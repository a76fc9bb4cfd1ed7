#include "kernels/cpu/sum_exp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace tpserve::kernels::cpu {
namespace {

double Reference(const std::vector<float>& x, double scale, double offset) {
  double sum = 0.0;
  for (float v : x) sum += std::exp(v * scale - offset);
  return sum;
}

TEST(SumExpTest, MatchesTheDoubleReferenceOverLengthsAndTails) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 33, 100, 49152, 49153}) {
    for (float scale : {1.0f, 1.0f / 0.7f, 1.0f / 1.3f}) {
      std::vector<float> x(n);
      for (float& v : x) v = dist(rng);
      const float offset = *std::max_element(x.begin(), x.end()) * scale;
      const double want = Reference(x, scale, offset);
      const double got = SumExp(x.data(), n, scale, offset);
      EXPECT_NEAR(got, want, 2e-6 * want) << "n " << n << " scale " << scale;
      EXPECT_GE(got, 1.0 - 1e-6);  // the largest term is e^0
    }
  }
}

TEST(SumExpTest, EmptyIsZeroAndTheOrderIsFixed) {
  EXPECT_EQ(SumExp(nullptr, 0, 1.0f, 0.0f), 0.0);
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 9.0f;
  const double a = SumExp(x.data(), 1000, 1.0f, 9.0f);
  EXPECT_EQ(SumExp(x.data(), 1000, 1.0f, 9.0f), a);  // bit for bit
}

TEST(SumExpTest, FarBelowTheOffsetUnderflowsToNothing) {
  const std::vector<float> x = {0.0f, -200.0f, -1000.0f};
  EXPECT_NEAR(SumExp(x.data(), 3, 1.0f, 0.0f), 1.0, 1e-12);
}

}  // namespace
}  // namespace tpserve::kernels::cpu
