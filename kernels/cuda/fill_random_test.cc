#include "kernels/cuda/fill_random.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/hash_uniform.h"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/cuda_test_util.h"

namespace tpserve::cuda {
namespace {

using testing::DeviceArray;

std::vector<float> Fill(int64_t n, uint64_t seed, float scale) {
  DeviceArray<float> d(n);  // [n]
  EXPECT_EQ(LaunchFillRandom(d.data(), n, seed, scale, nullptr), cudaSuccess);
  return d.Download();
}

std::vector<uint16_t> FillBf16(int64_t n, uint64_t seed, float scale) {
  DeviceArray<uint16_t> d(n);  // [n] bf16
  EXPECT_EQ(LaunchFillRandom(reinterpret_cast<__nv_bfloat16*>(d.data()), n, seed, scale, nullptr),
            cudaSuccess);
  return d.Download();
}

// Same (seed, i), same value: across calls and across lengths (so across launch shapes; the
// long fill takes 4 passes of the grid-stride loop).
TEST(FillRandomTest, DeterministicAndIndependentOfLength) {
  TPSERVE_SKIP_WITHOUT_GPU();
  constexpr int64_t kShort = 1000;
  constexpr int64_t kLong = (int64_t{3} << 24) + 5;
  const std::vector<float> a = Fill(kShort, 42, 1.0f);
  const std::vector<float> b = Fill(kLong, 42, 1.0f);
  const std::vector<float> c = Fill(kLong, 42, 1.0f);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), kShort * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(b.data(), c.data(), kLong * sizeof(float)), 0);
}

// The GPU makes exactly the values the CPU backend makes (kernels/cpu/hash_uniform.h), so a
// synthetic model is the same model on both backends.
TEST(FillRandomTest, SameValuesAsTheHostHash) {
  TPSERVE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 4097;
  const std::vector<float> gpu = Fill(kN, 9, 0.5f);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(gpu[i], 0.5f * kernels::HashUniform(9, static_cast<uint64_t>(i))) << i;
  }
}

TEST(FillRandomTest, SeedsGiveDifferentStreams) {
  TPSERVE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 1 << 16;
  const std::vector<float> a = Fill(kN, 1, 1.0f);
  const std::vector<float> b = Fill(kN, 2, 1.0f);
  int64_t same = 0;
  for (int64_t i = 0; i < kN; ++i) same += a[i] == b[i];
  EXPECT_LT(same, 16);  // 2^24 possible values: ~0.004 coincidences expected
}

// u is uniform on [-1, 1): mean 0, variance 1/3. Over n = 2^22 values the sample mean has
// standard deviation scale / sqrt(3n) and the sample variance a relative one of sqrt(0.8 / n)
// ~ 4.4e-4; the bounds below sit at 6 and ~20 standard deviations.
TEST(FillRandomTest, RangeAndMoments) {
  TPSERVE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = int64_t{1} << 22;
  for (float scale : {1.0f, 0.02f}) {
    const std::vector<float> v = Fill(kN, 7, scale);
    double sum = 0.0, sum_sq = 0.0;
    float lo = scale, hi = -scale;
    for (float x : v) {
      ASSERT_GE(x, -scale);
      ASSERT_LT(x, scale);
      sum += x;
      sum_sq += static_cast<double>(x) * x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    const double mean = sum / kN;
    const double var = sum_sq / kN - mean * mean;
    EXPECT_LT(std::fabs(mean), 6.0 * scale / std::sqrt(3.0 * kN)) << "scale " << scale;
    EXPECT_NEAR(var, scale * scale / 3.0, 0.01 * scale * scale / 3.0) << "scale " << scale;
    EXPECT_LT(lo, -0.999f * scale);
    EXPECT_GT(hi, 0.999f * scale);
  }
}

// The bf16 fill is the f32 fill rounded to nearest even. Rounding is monotonic, so |value| stays
// within scale rounded to bf16 (0.05 rounds up to 0.0500488, which values may reach).
TEST(FillRandomTest, Bf16IsRoundedF32) {
  TPSERVE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 1 << 20;
  constexpr float kScale = 0.05f;
  const float bound = Bf16BitsToFloat(FloatToBf16Bits(kScale));
  const std::vector<float> f = Fill(kN, 9, kScale);
  const std::vector<uint16_t> b = FillBf16(kN, 9, kScale);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(b[i], FloatToBf16Bits(f[i])) << i;
    ASSERT_LE(std::fabs(Bf16BitsToFloat(b[i])), bound) << i;
  }
}

// Indices past 2^31 (a 16-GB weight tensor holds 8G bf16 values): the fill reaches them, and they
// are not the values of index i - 2^31 (what a 32-bit index would repeat).
TEST(FillRandomTest, IndicesPast2To31) {
  TPSERVE_SKIP_WITHOUT_GPU();
  constexpr int64_t kTail = 4096;
  constexpr int64_t kN = (int64_t{1} << 31) + kTail;
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (free_bytes < kN * sizeof(uint16_t) + (size_t{1} << 30)) {
    GTEST_SKIP() << "needs " << kN * sizeof(uint16_t) << " B free";
  }
  DeviceArray<uint16_t> d(kN);                                                // [kN] bf16
  ASSERT_EQ(cudaMemset(d.data(), 0xff, kN * sizeof(uint16_t)), cudaSuccess);  // NaN bits
  ASSERT_EQ(LaunchFillRandom(reinterpret_cast<__nv_bfloat16*>(d.data()), kN, 3, 1.0f, nullptr),
            cudaSuccess);
  std::vector<uint16_t> head(kTail), tail(kTail);
  ASSERT_EQ(cudaMemcpy(head.data(), d.data(), kTail * sizeof(uint16_t), cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(tail.data(), d.data() + (kN - kTail), kTail * sizeof(uint16_t),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(head, FillBf16(kTail, 3, 1.0f));
  int64_t same = 0;
  for (int64_t i = 0; i < kTail; ++i) {
    ASSERT_LE(std::fabs(Bf16BitsToFloat(tail[i])), 1.0f) << "index " << kN - kTail + i;
    same += tail[i] == head[i];
  }
  EXPECT_LT(same, kTail / 8);  // bf16 keeps 8 bits of u: ~1/256 coincide by chance
}

// Needs no GPU: nothing is launched.
TEST(FillRandomTest, EmptyIsNoop) {
  EXPECT_EQ(LaunchFillRandom<float>(nullptr, 0, 1, 1.0f, nullptr), cudaSuccess);
  EXPECT_EQ(LaunchFillRandom<float>(nullptr, -1, 1, 1.0f, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace tpserve::cuda
