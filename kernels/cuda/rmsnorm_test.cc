#include "kernels/cuda/rmsnorm.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/reference/add.h"
#include "kernels/cpu/reference/rmsnorm.h"
#include "kernels/cuda/cuda_test_util.h"

namespace tpserve::cuda {
namespace {

using testing::DeviceArray;
using testing::RandomFloats;

constexpr float kEps = 1e-5f;

// f32 outputs: each thread sums <= ceil(8192 / 256) = 32 squares with FMA, then 5 butterfly and
// 8 warp-sum additions: a sum of positive terms with relative error <= 45 u ~ 2.7e-6 (u = 2^-24);
// the sqrt halves it; the mean, sqrt, reciprocal and two products add <= 6 u. 1e-5 relative
// is about 5x that bound (the reference is float64).
constexpr double kF32RelTol = 1e-5;
// bf16 outputs: rounding to bf16 adds <= 2^-9 relative on top of the f32 error above.
constexpr double kBf16RelTol = 1.0 / 256;

struct Shape {
  int64_t m, d;
};
constexpr Shape kShapes[] = {{1, 1},    {1, 576},  {7, 576},   {64, 576},
                             {1, 4097}, {7, 4097}, {64, 4096}, {3, 8192}};

// x: [m, d] with rows of very different scales (the norm divides it out).
std::vector<float> Input(int64_t m, int64_t d, uint32_t seed) {
  std::vector<float> x = RandomFloats(m * d, seed);
  for (int64_t r = 0; r < m; ++r) {
    const float s = std::ldexp(1.0f, static_cast<int>(r % 9) * 3 - 12);  // 2^-12 .. 2^12
    for (int64_t i = 0; i < d; ++i) x[r * d + i] *= s;
  }
  return x;
}

std::vector<float> Reference(const std::vector<float>& x, const std::vector<float>& w, int64_t m,
                             int64_t d) {
  std::vector<float> out(m * d);  // [m, d]
  kernels::cpu::reference::RmsNorm(x.data(), w.data(), kEps, out.data(), m, d);
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& ref, double rel_tol,
                const char* what, const Shape& s) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], ref[i], rel_tol * std::fabs(ref[i]) + 1e-30)
        << what << " m=" << s.m << " d=" << s.d << " at " << i;
  }
}

std::vector<float> DownloadBf16(const DeviceArray<uint16_t>& a) {
  return testing::Bf16ToFloats(a.Download());
}

template <typename T>
T* As(DeviceArray<uint16_t>& a) {
  return reinterpret_cast<T*>(a.data());
}

TEST(RmsNormTest, MatchesReferenceF32AndBf16) {
  TPSERVE_SKIP_WITHOUT_GPU();
  for (const Shape& s : kShapes) {
    const std::vector<float> x = Input(s.m, s.d, 1);    // [m, d]
    const std::vector<float> w = RandomFloats(s.d, 2);  // [d]
    const std::vector<float> ref = Reference(x, w, s.m, s.d);
    DeviceArray<float> d_x(x);
    DeviceArray<float> d_w(w);
    DeviceArray<float> d_out(s.m * s.d);
    DeviceArray<uint16_t> d_out16(s.m * s.d);
    ASSERT_EQ(LaunchRmsNorm(d_x.data(), d_w.data(), kEps, s.m, s.d, d_out.data(), nullptr),
              cudaSuccess);
    ASSERT_EQ(
        LaunchRmsNorm(d_x.data(), d_w.data(), kEps, s.m, s.d, As<__nv_bfloat16>(d_out16), nullptr),
        cudaSuccess);
    ExpectNear(d_out.Download(), ref, kF32RelTol, "f32", s);
    ExpectNear(DownloadBf16(d_out16), ref, kBf16RelTol, "bf16", s);
  }
}

TEST(RmsNormTest, InPlaceF32) {
  TPSERVE_SKIP_WITHOUT_GPU();
  for (const Shape& s : kShapes) {
    const std::vector<float> x = Input(s.m, s.d, 3);
    const std::vector<float> w = RandomFloats(s.d, 4);
    DeviceArray<float> d_x(x);
    DeviceArray<float> d_w(w);
    DeviceArray<float> d_out(s.m * s.d);
    ASSERT_EQ(LaunchRmsNorm(d_x.data(), d_w.data(), kEps, s.m, s.d, d_out.data(), nullptr),
              cudaSuccess);
    ASSERT_EQ(LaunchRmsNorm(d_x.data(), d_w.data(), kEps, s.m, s.d, d_x.data(), nullptr),
              cudaSuccess);
    const std::vector<float> separate = d_out.Download();
    const std::vector<float> in_place = d_x.Download();
    ASSERT_EQ(std::memcmp(separate.data(), in_place.data(), separate.size() * sizeof(float)), 0)
        << "m=" << s.m << " d=" << s.d;
  }
}

TEST(RmsNormTest, AddRmsNormMatchesReference) {
  TPSERVE_SKIP_WITHOUT_GPU();
  for (const Shape& s : kShapes) {
    std::vector<float> residual = Input(s.m, s.d, 5);   // [m, d]
    const std::vector<float> x = Input(s.m, s.d, 6);    // [m, d]
    const std::vector<float> w = RandomFloats(s.d, 7);  // [d]
    DeviceArray<float> d_res(residual);
    DeviceArray<float> d_res16(residual);
    DeviceArray<float> d_x(x);
    DeviceArray<float> d_w(w);
    DeviceArray<float> d_out(s.m * s.d);
    DeviceArray<uint16_t> d_out16(s.m * s.d);
    ASSERT_EQ(LaunchAddRmsNorm(d_res.data(), d_x.data(), d_w.data(), kEps, s.m, s.d, d_out.data(),
                               nullptr),
              cudaSuccess);
    ASSERT_EQ(LaunchAddRmsNorm(d_res16.data(), d_x.data(), d_w.data(), kEps, s.m, s.d,
                               As<__nv_bfloat16>(d_out16), nullptr),
              cudaSuccess);
    // residual += x is one correctly rounded f32 addition per element: exact.
    kernels::cpu::reference::Add(residual.data(), x.data(), s.m * s.d);
    const std::vector<float> ref = Reference(residual, w, s.m, s.d);
    for (const DeviceArray<float>* r : {&d_res, &d_res16}) {
      const std::vector<float> got = r->Download();
      ASSERT_EQ(std::memcmp(got.data(), residual.data(), got.size() * sizeof(float)), 0)
          << "residual m=" << s.m << " d=" << s.d;
    }
    ExpectNear(d_out.Download(), ref, kF32RelTol, "add f32", s);
    ExpectNear(DownloadBf16(d_out16), ref, kBf16RelTol, "add bf16", s);
  }
}

// Each row normalised alone gives the same bits as inside a batch of 64 (one block per row, a
// reduction order fixed by d alone).
TEST(RmsNormTest, RowResultIsBatchInvariant) {
  TPSERVE_SKIP_WITHOUT_GPU();
  constexpr int64_t kM = 64;
  for (int64_t d : {576, 4096, 4097}) {
    const std::vector<float> x = Input(kM, d, 8);   // [kM, d]
    const std::vector<float> r0 = Input(kM, d, 9);  // [kM, d], AddRmsNorm's residual
    const std::vector<float> w = RandomFloats(d, 10);
    DeviceArray<float> d_x(x);
    DeviceArray<float> d_w(w);
    DeviceArray<float> d_batch(kM * d);
    DeviceArray<uint16_t> d_batch16(kM * d);
    DeviceArray<float> d_res_batch(r0);
    DeviceArray<float> d_add_batch(kM * d);
    ASSERT_EQ(LaunchRmsNorm(d_x.data(), d_w.data(), kEps, kM, d, d_batch.data(), nullptr),
              cudaSuccess);
    ASSERT_EQ(
        LaunchRmsNorm(d_x.data(), d_w.data(), kEps, kM, d, As<__nv_bfloat16>(d_batch16), nullptr),
        cudaSuccess);
    ASSERT_EQ(LaunchAddRmsNorm(d_res_batch.data(), d_x.data(), d_w.data(), kEps, kM, d,
                               d_add_batch.data(), nullptr),
              cudaSuccess);
    const std::vector<float> batch = d_batch.Download();
    const std::vector<uint16_t> batch16 = d_batch16.Download();
    const std::vector<float> add_batch = d_add_batch.Download();
    for (int64_t r : {int64_t{0}, int64_t{17}, kM - 1}) {
      DeviceArray<float> d_row(std::vector<float>(x.begin() + r * d, x.begin() + (r + 1) * d));
      DeviceArray<float> d_res_row(
          std::vector<float>(r0.begin() + r * d, r0.begin() + (r + 1) * d));
      DeviceArray<float> d_alone(d);
      DeviceArray<uint16_t> d_alone16(d);
      DeviceArray<float> d_add_alone(d);
      ASSERT_EQ(LaunchRmsNorm(d_row.data(), d_w.data(), kEps, 1, d, d_alone.data(), nullptr),
                cudaSuccess);
      ASSERT_EQ(LaunchRmsNorm(d_row.data(), d_w.data(), kEps, 1, d, As<__nv_bfloat16>(d_alone16),
                              nullptr),
                cudaSuccess);
      ASSERT_EQ(LaunchAddRmsNorm(d_res_row.data(), d_row.data(), d_w.data(), kEps, 1, d,
                                 d_add_alone.data(), nullptr),
                cudaSuccess);
      const std::vector<float> alone = d_alone.Download();
      const std::vector<uint16_t> alone16 = d_alone16.Download();
      const std::vector<float> add_alone = d_add_alone.Download();
      EXPECT_EQ(std::memcmp(alone.data(), batch.data() + r * d, d * sizeof(float)), 0)
          << "d=" << d << " row " << r;
      EXPECT_EQ(std::memcmp(alone16.data(), batch16.data() + r * d, d * sizeof(uint16_t)), 0)
          << "bf16 d=" << d << " row " << r;
      EXPECT_EQ(std::memcmp(add_alone.data(), add_batch.data() + r * d, d * sizeof(float)), 0)
          << "add d=" << d << " row " << r;
    }
  }
}

// Needs no GPU: nothing is launched.
TEST(RmsNormTest, EmptyIsNoopAndNegativeIsInvalid) {
  EXPECT_EQ(LaunchRmsNorm<float>(nullptr, nullptr, kEps, 0, 4096, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(
      LaunchAddRmsNorm<__nv_bfloat16>(nullptr, nullptr, nullptr, kEps, 0, 4096, nullptr, nullptr),
      cudaSuccess);
  EXPECT_EQ(LaunchRmsNorm<float>(nullptr, nullptr, kEps, -1, 4096, nullptr, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace tpserve::cuda
