#include "kernels/cpu/swiglu.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/swiglu.h"
#include "kernels/cpu/test_util.h"

namespace tpserve::kernels::cpu {
namespace {

using testing::BitEqual;
using testing::RandomVector;

// Exp is within 2 ulp; 1 + e, the division and the product add one rounding each, and the
// relative error of e^-g passes into g / (1 + e^-g) damped by e / (1 + e) < 1: about 5 ulp
// = 3e-7 relative. 1e-6 leaves margin for the float inputs being exact in the reference.
constexpr double kRelTol = 1e-6;

TEST(SwiGluTest, ConcatenatedLayoutMatchesReference) {
  ThreadPool pool(2);
  for (int64_t f : {1, 3, 17, 63, 577, 1536}) {
    for (int64_t m : {1, 4, 50}) {
      const std::vector<float> gate_up = RandomVector(m * 2 * f, 1 + f, -20, 20);  // [m, 2f]
      std::vector<float> gate, up;                                                 // [m, f]
      testing::SplitGateUp(gate_up, m, f, &gate, &up);
      std::vector<float> out(m * f), split(m * f), ref(m * f);
      SwiGlu(gate_up.data(), out.data(), m, f, &pool);
      SwiGluSplit(gate.data(), up.data(), split.data(), m, f, &pool);
      reference::SwiGlu(gate.data(), up.data(), ref.data(), m, f);
      for (int64_t i = 0; i < m * f; ++i) {
        ASSERT_NEAR(out[i], ref[i], kRelTol * std::fabs(ref[i]) + 1e-37) << "f=" << f << " " << i;
      }
      EXPECT_TRUE(BitEqual(out.data(), split.data(), m * f));
    }
  }
}

TEST(SwiGluTest, ExtremeGates) {
  const std::vector<float> gate = {-1000.0f, -90.0f, 0.0f, 90.0f, 1000.0f};
  const std::vector<float> up(5, 2.0f);
  std::vector<float> out(5);
  SwiGluSplit(gate.data(), up.data(), out.data(), 1, 5);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 0.0f, 1e-30);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 180.0f);
  EXPECT_EQ(out[4], 2000.0f);
}

TEST(SwiGluTest, BatchInvariant) {
  const int64_t m = 64, f = 1536;
  const std::vector<float> gate_up = RandomVector(m * 2 * f, 3, -8, 8);  // [m, 2f]
  std::vector<float> batch(m * f), one(f);
  ThreadPool pool(2);
  SwiGlu(gate_up.data(), batch.data(), m, f, &pool);
  for (int64_t r = 0; r < m; ++r) {
    SwiGlu(&gate_up[r * 2 * f], one.data(), 1, f);
    ASSERT_TRUE(BitEqual(&batch[r * f], one.data(), f)) << r;
  }
}

}  // namespace
}  // namespace tpserve::kernels::cpu
