#include "server/coordinator/speculator.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpserve::coordinator {
namespace {

// A sequence whose output repeats its prompt: "1 2 3 4 5 6 7 8 | 1 2 3" proposes 4 5 6 ...
Sequence Repeating() {
  Sequence seq;
  seq.id = 3;
  seq.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  seq.generated = {1, 2, 3};
  return seq;
}

TEST(SpeculatorTest, FlagsAreParsedAndChecked) {
  EXPECT_EQ(*ParseSpeculativeMode("off"), SpeculativeMode::kOff);
  EXPECT_EQ(*ParseSpeculativeMode("ngram"), SpeculativeMode::kNgram);
  EXPECT_EQ(ParseSpeculativeMode("maybe").status().message(),
            "--speculative: 'maybe' is not one of off, ngram, draft");
  EXPECT_EQ(*ParseSpeculativeMode("draft"), SpeculativeMode::kDraft);
  SpeculativeOptions o;
  for (int k : {1, 4, 16}) {
    o.max_draft = k;
    EXPECT_TRUE(ValidateSpeculativeOptions(o).ok()) << k;
  }
  o.max_draft = 17;
  EXPECT_EQ(ValidateSpeculativeOptions(o).message(),
            "--num_speculative_tokens: 17 is outside [1, 16]");
  o.max_draft = 0;
  EXPECT_FALSE(ValidateSpeculativeOptions(o).ok());
  o.max_draft = 4;
  o.mode = SpeculativeMode::kDraft;
  EXPECT_EQ(ValidateSpeculativeOptions(o).message(),
            "--draft_model: --speculative draft needs a draft model");
  o.draft_model = "draft.gguf";
  EXPECT_TRUE(ValidateSpeculativeOptions(o).ok());
  o.mode = SpeculativeMode::kNgram;
  EXPECT_EQ(ValidateSpeculativeOptions(o).message(),
            "--draft_model: given without --speculative draft, which alone uses it");
}

TEST(SpeculatorTest, OffProposesNothing) {
  Speculator off(SpeculativeOptions{});
  std::vector<int32_t> draft = {5};
  off.Propose(Repeating(), 1, 100, &draft);
  EXPECT_TRUE(draft.empty());
}

// The draft length follows the sequence's acceptance, within [1, max_draft], and its limit:
// with no cost evidence, each position that is at least 1 in 10 likely to be kept.
TEST(SpeculatorTest, TheDraftFollowsAcceptance) {
  SpeculativeOptions o;
  o.mode = SpeculativeMode::kNgram;
  o.max_draft = 6;
  Speculator s(o);
  const Sequence seq = Repeating();
  std::vector<int32_t> draft;
  s.Propose(seq, 1, 100, &draft);
  EXPECT_EQ(draft, (std::vector<int32_t>{4, 5, 6, 7, 8, 9}))
      << "a new sequence starts at 3 in 4: 0.75^6 = 0.18 is still worth proposing";
  s.Propose(seq, 1, 3, &draft);
  EXPECT_EQ(draft.size(), 3u) << "what max_tokens leaves";
  s.Propose(seq, 1, 0, &draft);
  EXPECT_TRUE(draft.empty());
  for (int i = 0; i < 3; ++i) s.Record(seq.id, 6, 0);  // kept 1.03 of 3.56 tried: 0.29
  s.Propose(seq, 1, 100, &draft);
  EXPECT_EQ(draft.size(), 1u) << "0.29 is, 0.29^2 = 0.08 is not";
  s.Record(seq.id, 1, 1);  // kept 1.72 of 3.49
  s.Propose(seq, 1, 100, &draft);
  EXPECT_EQ(draft.size(), 3u) << "0.49^3 = 0.12 is, 0.49^4 = 0.06 is not";
  for (int i = 0; i < 10; ++i) s.Record(seq.id, 6, 0);
  s.Propose(seq, 1, 100, &draft);
  EXPECT_TRUE(draft.empty()) << "none accepted: no proposal";
  s.Forget(seq.id);
  s.Propose(seq, 1, 100, &draft);
  EXPECT_EQ(draft.size(), 6u) << "forgotten: a new sequence again";
}

// The cost model fits t = a + b n from step times; with proposals that are rarely accepted
// and a large batch (a token's share of a step near b) drafting stops, but for a probe every
// kProbeEvery steps; at batch 1 (a token's share is a + b) it goes on.
TEST(SpeculatorTest, TheCostModelTurnsDraftingDownAsTheBatchGrows) {
  SpeculativeOptions o;
  o.mode = SpeculativeMode::kNgram;
  Speculator s(o);
  for (int64_t n : {1, 5, 16, 64, 200, 3, 40}) {
    s.ObserveStep(n, absl::Milliseconds(10) + n * absl::Microseconds(500));
  }
  EXPECT_NEAR(s.fixed_cost(), 0.010, 1e-6);
  EXPECT_NEAR(s.per_token_cost(), 0.0005, 1e-8);
  const Sequence seq = Repeating();
  for (int i = 0; i < 4; ++i) s.Record(seq.id, 2, 0);  // kept 0.72 of 3.49: 0.21
  std::vector<int32_t> draft;
  s.Propose(seq, 200, 100, &draft);
  EXPECT_TRUE(draft.empty()) << "at batch 200, 0.21 x 0.55 ms does not pay 1.25 x 0.5 ms";
  s.Propose(seq, 1, 100, &draft);
  EXPECT_EQ(draft.size(), 1u) << "at batch 1, 0.21 x 10.5 ms pays 1.25 x 0.5 ms";
  for (int i = 0; i < 20; ++i) s.Record(seq.id, 1, 1);  // now it is accepted
  s.Propose(seq, 1, 100, &draft);
  EXPECT_EQ(draft.size(), 4u) << "at batch 1, all kept: the longest draft";
  int drafted = 0;
  for (int step = 0; step < 2 * Speculator::kProbeEvery; ++step) {
    s.Propose(seq, 200, 100, &draft);  // a token's share: 0.55 ms
    drafted += draft.empty() ? 0 : 1;
  }
  EXPECT_EQ(drafted, 2) << "at batch 200, only the probes";
}

// Draft mode: DraftLength decides alone, and what the draft model takes per proposal counts
// as cost.
TEST(SpeculatorTest, ADraftModelsTimeCountsAgainstItsProposals) {
  SpeculativeOptions o;
  o.mode = SpeculativeMode::kDraft;
  o.draft_model = "draft.gguf";
  Speculator s(o);
  for (int64_t n : {1, 5, 16, 64}) {
    s.ObserveStep(n, absl::Milliseconds(10) + n * absl::Microseconds(500));
  }
  const Sequence seq = Repeating();
  for (int i = 0; i < 20; ++i) s.Record(seq.id, 1, 1);
  EXPECT_EQ(s.DraftLength(seq, 1, 100), 4) << "all kept: 10.5 ms pays 1.25 x 0.5 ms each";
  s.ObserveDraft(4, absl::Milliseconds(40));  // 10 ms per proposal
  EXPECT_NEAR(s.draft_cost(), 0.010, 1e-9);
  EXPECT_EQ(s.DraftLength(seq, 1, 100), 0) << "10.5 ms does not pay 1.25 x 10.5 ms";
}

}  // namespace
}  // namespace tpserve::coordinator
