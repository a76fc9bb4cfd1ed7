// Host-only: needs no GPU. Checks the host conversion against hand-worked cases and against the
// host path of CUDA's own __float2bfloat16_rn (cuda_bf16.h), an independent implementation.
#include "kernels/cuda/bf16_host.h"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tpserve::cuda {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t CudaBits(float f) {
  const __nv_bfloat16 b = __float2bfloat16_rn(f);
  uint16_t bits;
  std::memcpy(&bits, &b, sizeof(bits));
  return bits;
}

bool IsBf16Nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

TEST(Bf16HostTest, TiesRoundToEven) {
  // Between 1.0 (0x3f80, even) and 1 + 2^-7 (0x3f81): the midpoint 1 + 2^-8 goes to the even one.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f808000u)), 0x3f80u);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f808001u)), 0x3f81u);  // just above the midpoint
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f807fffu)), 0x3f80u);  // just below
  // Between 0x3f81 (odd) and 0x3f82: the midpoint goes up to the even one.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f818000u)), 0x3f82u);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f817fffu)), 0x3f81u);
  // Negative values round by magnitude.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0xbf808000u)), 0xbf80u);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0xbf818000u)), 0xbf82u);
  // A carry into the exponent: the largest mantissa rounds up to the next power of two.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3fffffffu)), 0x4000u);
}

TEST(Bf16HostTest, SubnormalsAndZeros) {
  EXPECT_EQ(FloatToBf16Bits(0.0f), 0x0000u);
  EXPECT_EQ(FloatToBf16Bits(-0.0f), 0x8000u);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x00000001u)), 0x0000u);  // smallest subnormal -> 0
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x00008000u)), 0x0000u);  // tie, even neighbour 0
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x00018000u)), 0x0002u);  // tie, odd 1 -> 2
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x00010000u)), 0x0001u);  // a bf16 subnormal, exact
}

TEST(Bf16HostTest, InfinityAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBf16Bits(inf), 0x7f80u);
  EXPECT_EQ(FloatToBf16Bits(-inf), 0xff80u);
  // FLT_MAX lies above the midpoint between bf16's largest finite value (0x7f7f) and 2^128.
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(FloatToBf16Bits(-std::numeric_limits<float>::max()), 0xff80u);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7f7f7fffu)), 0x7f7fu);  // below that midpoint: finite
  EXPECT_TRUE(std::isinf(Bf16BitsToFloat(0x7f80u)));
}

TEST(Bf16HostTest, NanStaysNan) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(IsBf16Nan(FloatToBf16Bits(qnan)));
  EXPECT_TRUE(IsBf16Nan(FloatToBf16Bits(-qnan)));
  // NaNs whose payload lives only in the low 16 bits: plain truncation would make them inf.
  for (uint32_t u : {0x7f800001u, 0xff800001u, 0x7f80ffffu, 0x7fffffffu, 0xffffffffu}) {
    const uint16_t b = FloatToBf16Bits(FromBits(u));
    EXPECT_TRUE(IsBf16Nan(b)) << std::hex << u << " -> " << b;
    EXPECT_EQ(b & 0x8000u, (u >> 16) & 0x8000u) << "sign kept for " << std::hex << u;
    EXPECT_TRUE(std::isnan(Bf16BitsToFloat(b)));
  }
}

TEST(Bf16HostTest, ExactValuesRoundTrip) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = Bf16BitsToFloat(bits);
    // A signalling NaN comes back quieted (bit 6 set), everything else unchanged.
    const uint16_t expected = IsBf16Nan(bits) ? static_cast<uint16_t>(bits | 0x0040u) : bits;
    ASSERT_EQ(FloatToBf16Bits(f), expected) << std::hex << b;
  }
  std::vector<float> in = {1.0f, -2.5f, 0.0f, 3.0f};
  std::vector<uint16_t> bits(in.size());
  std::vector<float> out(in.size());
  FloatsToBf16(in.data(), static_cast<int64_t>(in.size()), bits.data());
  Bf16ToFloats(bits.data(), static_cast<int64_t>(bits.size()), out.data());
  EXPECT_EQ(out, in);
}

// Every upper half with low halves at and around the rounding boundaries, then random words:
// bit-identical to CUDA's conversion except NaN payloads (both NaN).
TEST(Bf16HostTest, MatchesCudaFloat2Bfloat16Rn) {
  auto check = [](uint32_t u) {
    const float f = FromBits(u);
    const uint16_t ours = FloatToBf16Bits(f);
    const uint16_t theirs = CudaBits(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(IsBf16Nan(ours) && IsBf16Nan(theirs)) << std::hex << u;
    } else {
      EXPECT_EQ(ours, theirs) << std::hex << u;
    }
    return !::testing::Test::HasFailure();
  };
  for (uint32_t hi = 0; hi <= 0xffffu; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      ASSERT_TRUE(check((hi << 16) | lo));
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) ASSERT_TRUE(check(static_cast<uint32_t>(rng())));
}

}  // namespace
}  // namespace tpserve::cuda
