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

// Left-to-right float additions: the same bits as the scalar loop, for 1 to 4 parts.
TEST(AddTest, SumInOrderMatchesReferenceExactly) {
  for (int parts = 1; parts <= 4; ++parts) {
    for (int64_t n : {1, 7, 8, 576, 579}) {
      std::vector<std::vector<float>> data;
      std::vector<const float*> ptrs;
      for (int p = 0; p < parts; ++p) data.push_back(RandomVector(n, 10 + p));
      for (const auto& d : data) ptrs.push_back(d.data());
      std::vector<float> out(n + 1, -7.0f), ref(n);
      SumInOrder(ptrs.data(), parts, out.data(), n);
      reference::SumInOrder(ptrs.data(), parts, ref.data(), n);
      EXPECT_TRUE(BitEqual(out.data(), ref.data(), n)) << parts << " parts, n " << n;
      EXPECT_EQ(out[n], -7.0f) << "wrote past the end";
    }
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
