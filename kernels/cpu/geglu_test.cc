#include "kernels/cpu/geglu.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/geglu.h"
#include "kernels/cpu/test_util.h"

namespace tpserve::kernels::cpu {
namespace {

using testing::BitEqual;
using testing::RandomVector;

// z = 2 sqrt(2/pi) g (1 + 0.044715 g^2) takes ~4 roundings; e^-z's relative error is then
// |z| times z's (plus Exp's 2 ulp), and passes into g / (1 + e^-z) damped by e / (1 + e) < 1;
// the division and the product add one rounding each. So ~(8 + 4 |z|) ulp relative. Where
// e^-z passes Exp's overflow (z < -88.7, g < -10) the kernel gives -0 for a true value below
// 1e-36: the absolute floor.
double Tolerance(float g, float ref) {
  const double z = 1.5957691216 * std::fabs(g) * (1 + 0.044715 * g * g);
  return (8 + 4 * z) * 6e-8 * std::fabs(ref) + 1e-35;
}

TEST(GeGluTest, ConcatenatedLayoutMatchesReference) {
  ThreadPool pool(2);
  for (int64_t f : {1, 3, 17, 63, 577, 2048}) {
    for (int64_t m : {1, 4, 50}) {
      const std::vector<float> gate_up = RandomVector(m * 2 * f, 1 + f, -12, 12);  // [m, 2f]
      std::vector<float> gate, up;                                                 // [m, f]
      testing::SplitGateUp(gate_up, m, f, &gate, &up);
      std::vector<float> out(m * f), split(m * f), ref(m * f);
      GeGlu(gate_up.data(), out.data(), m, f, &pool);
      GeGluSplit(gate.data(), up.data(), split.data(), m, f, &pool);
      reference::GeGlu(gate.data(), up.data(), ref.data(), m, f);
      for (int64_t i = 0; i < m * f; ++i) {
        ASSERT_NEAR(out[i], ref[i], Tolerance(gate[i], ref[i])) << "f=" << f << " g=" << gate[i];
      }
      EXPECT_TRUE(BitEqual(out.data(), split.data(), m * f));
    }
  }
}

TEST(GeGluTest, KnownValuesAndExtremeGates) {
  // gelu_tanh(1) = 0.841191990607..., gelu_tanh(-1) = -0.158808009392...
  const std::vector<float> gate = {-1e30f, -1000.0f, -1.0f, 0.0f, 1.0f, 1000.0f, 1e30f};
  const std::vector<float> up(gate.size(), 2.0f);
  std::vector<float> out(gate.size());
  GeGluSplit(gate.data(), up.data(), out.data(), 1, static_cast<int64_t>(gate.size()));
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_NEAR(out[2], 2 * -0.158808009392, 1e-6);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_NEAR(out[4], 2 * 0.841191990607, 1e-6);
  EXPECT_EQ(out[5], 2000.0f);
  EXPECT_EQ(out[6], 2e30f);
  EXPECT_TRUE(std::isnan([] {
    const float nan = std::nanf(""), two = 2.0f;
    float o;
    GeGluSplit(&nan, &two, &o, 1, 1);
    return o;
  }()));
}

TEST(GeGluTest, BatchAndThreadInvariant) {
  const int64_t m = 64, f = 2048;
  const std::vector<float> gate_up = RandomVector(m * 2 * f, 3, -8, 8);  // [m, 2f]
  std::vector<float> batch(m * f), one(f);
  ThreadPool pool(2);
  GeGlu(gate_up.data(), batch.data(), m, f, &pool);
  for (int64_t r = 0; r < m; ++r) {
    GeGlu(&gate_up[r * 2 * f], one.data(), 1, f);
    ASSERT_TRUE(BitEqual(&batch[r * f], one.data(), f)) << r;
  }
}

}  // namespace
}  // namespace tpserve::kernels::cpu
