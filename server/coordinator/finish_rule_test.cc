#include "server/coordinator/finish_rule.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpserve::coordinator {
namespace {

using tpserve::v1::FINISH_REASON_EOS;
using tpserve::v1::FINISH_REASON_LENGTH;
using tpserve::v1::FINISH_REASON_STOP;
using tpserve::v1::FINISH_REASON_UNSPECIFIED;

constexpr int32_t kEos = 2;

TEST(FinishRuleTest, TheTokenItselfEndsTheStream) {
  const std::vector<int32_t> stops = {7, 9};
  EXPECT_EQ(TokenFinish(kEos, kEos, false, stops), FINISH_REASON_EOS);
  EXPECT_EQ(TokenFinish(kEos, kEos, true, stops), FINISH_REASON_UNSPECIFIED);  // ignore_eos
  EXPECT_EQ(TokenFinish(9, kEos, false, stops), FINISH_REASON_STOP);
  EXPECT_EQ(TokenFinish(9, kEos, true, stops), FINISH_REASON_STOP);  // ignore_eos: ids still
  EXPECT_EQ(TokenFinish(5, kEos, false, stops), FINISH_REASON_UNSPECIFIED);
  // EOS listed as a stop id too: EOS wins, unless it is ignored.
  const std::vector<int32_t> eos_too = {kEos};
  EXPECT_EQ(TokenFinish(kEos, kEos, false, eos_too), FINISH_REASON_EOS);
  EXPECT_EQ(TokenFinish(kEos, kEos, true, eos_too), FINISH_REASON_STOP);
}

TEST(FinishRuleTest, ThenTheStopStringsThenTheLength) {
  EXPECT_EQ(TextFinish(false, 3, 4), FINISH_REASON_UNSPECIFIED);
  EXPECT_EQ(TextFinish(false, 4, 4), FINISH_REASON_LENGTH);
  EXPECT_EQ(TextFinish(true, 4, 4), FINISH_REASON_STOP);  // the stop string is the reason
  EXPECT_EQ(TextFinish(true, 1, 4), FINISH_REASON_STOP);
}

}  // namespace
}  // namespace tpserve::coordinator
