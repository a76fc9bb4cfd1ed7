#include "server/coordinator/ngram_proposer.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpserve::coordinator {
namespace {

std::vector<int32_t> Propose(const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& generated, int64_t k,
                             NgramOptions options = {.min_n = 2}) {
  std::vector<int32_t> out = {99};  // cleared first
  ProposeNgram(prompt, generated, options, k, &out);
  return out;
}

TEST(NgramProposerTest, ProposesWhatFollowedTheLatestMatchOfTheSuffix) {
  // "... 7 8 9 1 2 ..." earlier; the sequence ends in 7 8 9: propose 1 2 3 (k = 3).
  const std::vector<int32_t> prompt = {5, 7, 8, 9, 1, 2, 3, 4, 6};
  EXPECT_EQ(Propose(prompt, {7, 8, 9}, 3), (std::vector<int32_t>{1, 2, 3}));
  // The match may end in the generated tokens; the proposal stops at the sequence's end.
  EXPECT_EQ(Propose(prompt, {7, 8, 9}, 16), (std::vector<int32_t>{1, 2, 3, 4, 6, 7, 8, 9}));
  // The most recent match wins: 8 9 occurs twice, the later is followed by 0.
  EXPECT_EQ(Propose({8, 9, 1, 8, 9, 0, 4}, {8, 9}, 2), (std::vector<int32_t>{0, 4}));
}

TEST(NgramProposerTest, TheLongestSuffixThatMatchesGoesFirst) {
  // 3 9 is followed by 1 at the start, 2 3 9 by 5 later: the 3-gram wins although older.
  const std::vector<int32_t> prompt = {2, 3, 9, 5, 0, 3, 9, 1};
  EXPECT_EQ(Propose(prompt, {2, 3, 9}, 1), (std::vector<int32_t>{5}));
  NgramOptions two{.min_n = 2, .max_n = 2};  // only the 2-gram: the latest 3 9 is followed by 1
  EXPECT_EQ(Propose(prompt, {2, 3, 9}, 1, two), (std::vector<int32_t>{1}));
}

TEST(NgramProposerTest, NothingWithoutAMatchOrRoom) {
  EXPECT_TRUE(Propose({1, 2, 3, 4}, {5, 6}, 4).empty());
  EXPECT_TRUE(Propose({1, 2, 1, 2}, {}, 0).empty());
  EXPECT_TRUE(Propose({}, {}, 4).empty());
  EXPECT_TRUE(Propose({7}, {}, 4).empty());
  NgramOptions near{.min_n = 2, .window = 3};  // the match is further back than the window
  EXPECT_TRUE(Propose({4, 5, 1, 1, 1, 1}, {4, 5}, 2, near).empty());
  EXPECT_EQ(Propose({4, 5, 1, 1, 1, 1}, {4, 5}, 2), (std::vector<int32_t>{1, 1}));
}

}  // namespace
}  // namespace tpserve::coordinator
