#include "kernels/cpu/add.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/add.h"
#include "kernels/cpu/test_util.h"

namespace tpserve::kernels::cpu {
namespace {

using testing::BitEqual;
using testing::RandomVector;

// Elementwise single roundings: results must equal the scalar reference exactly.
TEST(AddTest, MatchesReferenceExactly) {
  for (int64_t n : {0, 1, 3, 17, 63, 576, 577}) {
    const std::vector<float> x = RandomVector(n, 1);
    const std::vector<float> y0 = RandomVector(n, 2);
    std::vector<float> y = y0, ref = y0, out(n);
    Add(y.data(), x.data(), n);
    reference::Add(ref.data(), x.data(), n);
    EXPECT_TRUE(BitEqual(y.data(), ref.data(), n)) << n;
    AddTo(y0.data(), x.data(), out.data(), n);
    EXPECT_TRUE(BitEqual(out.data(), ref.data(), n)) << n;
    Scale(y.data(), 0.37f, n);
    reference::Scale(ref.data(), 0.37f, n);
    EXPECT_TRUE(BitEqual(y.data(), ref.data(), n)) << n;
  }
}

TEST(AddTest, DoesNotWritePastTheEnd) {
  std::vector<float> y(20, 1.0f);
  const std::vector<float> x(20, 1.0f);
  Add(y.data(), x.data(), 13);
  EXPECT_EQ(y[12], 2.0f);
  EXPECT_EQ(y[13], 1.0f);
}

}  // namespace
}  // namespace tpserve::kernels::cpu
