#include "kernels/cuda/swiglu.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/reference/swiglu.h"
#include "kernels/cuda/cuda_test_util.h"

namespace tpserve::cuda {
namespace {

using testing::DeviceArray;
using testing::RandomFloats;

// The GPU value is silu(g) * u in f32: expf (<= 2 ulp), 1 + e^-g (two positive terms, no
// cancellation), an IEEE division and a product: <= ~6 u relative (u = 2^-24). Rounding to
// bf16 adds <= 2^-9 relative; 2^-8 covers both. The absolute floor covers results that underflow
// (silu(-100) ~ -4e-42 rounds to -0 in bf16).
constexpr double kRelTol = 1.0 / 256;
constexpr double kAbsTol = 1e-30;

void CheckSwiGlu(int64_t m, int64_t f) {
  std::vector<float> gate_up = RandomFloats(m * 2 * f, 41 + f, 8.0f);  // [m, 2f]
  // Saturating gates: e^-g overflows to inf (g < -88) or vanishes (g > 17).
  const float extremes[] = {-1000.0f, -100.0f, -88.5f, 0.0f, 20.0f, 100.0f, 1000.0f};
  for (int64_t j = 0; j < 7 && j < f; ++j) gate_up[(m - 1) * 2 * f + j] = extremes[j];
  std::vector<float> gate(m * f), up(m * f), ref(m * f);  // [m, f] each
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < f; ++i) {
      gate[r * f + i] = gate_up[r * 2 * f + i];
      up[r * f + i] = gate_up[r * 2 * f + f + i];
    }
  }
  kernels::cpu::reference::SwiGlu(gate.data(), up.data(), ref.data(), m, f);

  DeviceArray<float> d_gate_up(gate_up);
  DeviceArray<uint16_t> d_out(m * f);  // [m, f] bf16
  ASSERT_EQ(
      LaunchSwiGlu(d_gate_up.data(), m, f, reinterpret_cast<__nv_bfloat16*>(d_out.data()), nullptr),
      cudaSuccess);
  const std::vector<float> got = testing::Bf16ToFloats(d_out.Download());
  for (int64_t i = 0; i < m * f; ++i) {
    ASSERT_NEAR(got[i], ref[i], kRelTol * std::fabs(ref[i]) + kAbsTol)
        << "m=" << m << " f=" << f << " row " << i / f << " col " << i % f << " gate=" << gate[i]
        << " up=" << up[i];
  }
}

TEST(SwiGluTest, MatchesReference) {
  TPSERVE_SKIP_WITHOUT_GPU();
  for (int64_t f : {1, 576, 4097, 14336}) {
    for (int64_t m : {1, 7, 64}) CheckSwiGlu(m, f);
  }
}

TEST(SwiGluTest, EmptyIsNoop) {
  TPSERVE_SKIP_WITHOUT_GPU();
  EXPECT_EQ(LaunchSwiGlu(nullptr, 0, 14336, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(LaunchSwiGlu(nullptr, 5, 0, nullptr, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace tpserve::cuda
