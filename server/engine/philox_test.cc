#include "server/engine/philox.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tpserve::engine {
namespace {

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(PhiloxTest, KnownAnswers) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, UniformIsAPureFunctionInRange) {
  EXPECT_EQ(PhiloxUniform(42, 7), PhiloxUniform(42, 7));
  EXPECT_NE(PhiloxUniform(42, 7), PhiloxUniform(42, 8));
  EXPECT_NE(PhiloxUniform(42, 7), PhiloxUniform(43, 7));
  EXPECT_NE(PhiloxUniform(42, 7, 0), PhiloxUniform(42, 7, 1));
  double sum = 0.0;
  constexpr int kN = 100000;
  for (int i = 0; i < kN; ++i) {
    const double u = PhiloxUniform(1, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  // Mean of U(0,1) over 1e5 draws: standard error 0.0009.
  EXPECT_NEAR(sum / kN, 0.5, 0.005);
}

}  // namespace
}  // namespace tpserve::engine
