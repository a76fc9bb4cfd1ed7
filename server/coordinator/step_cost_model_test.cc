#include "server/coordinator/step_cost_model.h"

#include "gtest/gtest.h"

namespace tpserve::coordinator {
namespace {

// A CPU-like step: 8.5 ms for one token, 0.8 ms for each of the next four, then 2.5 ms each.
absl::Duration Step(int64_t n) {
  double ms = 8.5 + 0.8 * static_cast<double>(std::min<int64_t>(n, 5) - 1);
  if (n > 5) ms += 2.5 * static_cast<double>(n - 5);
  return absl::Microseconds(static_cast<int64_t>(ms * 1000));
}

TEST(StepCostModelTest, NothingIsKnownUntilTwoSizesAreSeen) {
  StepCostModel m;
  EXPECT_FALSE(m.Known());
  EXPECT_EQ(m.Seconds(4), 0.0);
  EXPECT_EQ(m.Added(1, 4), 0.0);
  m.Observe(1, Step(1));
  m.Observe(1, Step(1));
  EXPECT_FALSE(m.Known());
  EXPECT_NEAR(m.Seconds(3), 0.0085, 1e-9) << "one size: its cost";
  m.Observe(5, Step(5));
  EXPECT_TRUE(m.Known());
}

// The marginal cost follows the curve, where one fitted line would give one slope for all.
TEST(StepCostModelTest, TheCostOfMorePositionsIsTheCurvesAtThatSize) {
  StepCostModel m;
  for (int64_t n : {1, 2, 3, 5, 8, 16, 17, 24, 32, 64, 1, 5, 16, 32}) m.Observe(n, Step(n));
  EXPECT_NEAR(m.Seconds(1), 0.0085, 1e-6);
  EXPECT_NEAR(m.Seconds(4), 0.0085 + 3 * 0.0008, 1e-6) << "interpolated between 3 and 5";
  EXPECT_NEAR(m.Added(1, 4), 4 * 0.0008, 1e-6) << "a verification of 5 at batch 1";
  EXPECT_NEAR(m.Added(16, 4), 4 * 0.0025, 1e-6) << "4 more positions at batch 16";
  EXPECT_NEAR(m.Added(64, 16), 16 * 0.0025, 1e-6) << "past the largest: its last slope";
  EXPECT_NEAR(m.Seconds(200), m.Seconds(64) + 136 * 0.0025, 1e-6);
}

// Between a decode batch and the prefill chunks, sizes not seen yet cost what the last ones
// below them did, until steps of those sizes are seen.
TEST(StepCostModelTest, UnseenSizesCostWhatTheSizesBelowDid) {
  StepCostModel m;
  for (int64_t n : {1, 2, 64}) m.Observe(n, Step(n));
  EXPECT_NEAR(m.Added(2, 3), 3 * 0.0008, 1e-6) << "the slope of 1 to 2, not of 2 to 64";
  m.Observe(5, Step(5));
  m.Observe(8, Step(8));
  EXPECT_NEAR(m.Added(5, 3), 3 * 0.0025, 1e-6) << "seen: the curve's own";
}

// A larger step never looks cheaper than a smaller one, and recent steps weigh most.
TEST(StepCostModelTest, CostsNeverFallWithSizeAndFollowTheRecentSteps) {
  StepCostModel m;
  m.Observe(4, absl::Milliseconds(12));
  m.Observe(8, absl::Milliseconds(10));  // noise: cheaper than 4
  EXPECT_EQ(m.Added(4, 4), 0.0);
  EXPECT_GE(m.Seconds(8), m.Seconds(4));
  for (int i = 0; i < 200; ++i) m.Observe(8, absl::Milliseconds(20));
  EXPECT_NEAR(m.Added(4, 4), 0.008, 1e-4) << "the old 8-token steps have faded";
}

}  // namespace
}  // namespace tpserve::coordinator
