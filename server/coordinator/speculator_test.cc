#include "server/coordinator/speculator.h"

#include <algorithm>
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

// Steps that cost 8.5 ms for one token, 0.8 ms more for each of the next four, then 2.5 ms
// each (a CPU: the first token streams the weights, the next few ride along, then compute).
void ObserveCpuLikeSteps(Speculator* s) {
  for (int64_t n : {1, 2, 3, 5, 8, 16, 24, 32, 64, 200}) {
    const int64_t us =
        8500 + 800 * (std::min<int64_t>(n, 5) - 1) + 2500 * std::max<int64_t>(0, n - 5);
    s->ObserveStep(n, absl::Microseconds(us));
  }
}

// With proposals that are rarely accepted and a large batch (a token's share of a step near
// what a position adds) drafting stops; at batch 1 (a token's share is the whole step) it goes
// on, and where it stopped for want of acceptance it probes every kProbeEvery steps. Within a
// round, each sequence's proposals are costed where the step already is.
TEST(SpeculatorTest, TheCostModelTurnsDraftingDownAsTheBatchGrows) {
  SpeculativeOptions o;
  o.mode = SpeculativeMode::kNgram;
  Speculator s(o);
  ObserveCpuLikeSteps(&s);
  const Sequence seq = Repeating();
  for (int i = 0; i < 3; ++i) s.Record(seq.id, 2, 0);  // kept 1.03 of 3.56: 0.29
  std::vector<int32_t> draft;
  s.BeginRound();
  s.Propose(seq, 16, 100, &draft);
  EXPECT_TRUE(draft.empty()) << "at batch 16, 0.29 x 2.45 ms does not pay 1.25 x 2.5 ms";
  s.BeginRound();
  s.Propose(seq, 1, 100, &draft);
  EXPECT_EQ(draft.size(), 1u) << "at batch 1, 0.29 x 8.5 ms pays 1.25 x 0.8 ms";
  for (int i = 0; i < 20; ++i) s.Record(seq.id, 1, 1);  // now it is accepted
  s.BeginRound();
  s.Propose(seq, 1, 100, &draft);
  EXPECT_EQ(draft.size(), 4u) << "at batch 1, all kept: the longest draft";
  s.BeginRound();
  Sequence other = Repeating();
  other.id = 4;
  for (int i = 0; i < 20; ++i) s.Record(other.id, 1, 1);
  s.Propose(seq, 4, 100, &draft);
  EXPECT_EQ(draft.size(), 1u) << "batch 4 (2.73 ms a token): a 5th position pays 1.25 x 0.8 ms, "
                                 "a 6th not 1.25 x 2.5 ms";
  s.Propose(other, 4, 100, &draft);
  EXPECT_TRUE(draft.empty()) << "the step is at 5 positions already";
  int drafted = 0;
  for (int step = 0; step < 2 * Speculator::kProbeEvery * 20; ++step) {
    s.BeginRound();
    s.Propose(seq, 20, 100, &draft);
    drafted += draft.empty() ? 0 : 1;
  }
  EXPECT_EQ(drafted, 2) << "at batch 20 not even a sure proposal pays: a probe every 16 x 20";
  drafted = 0;
  for (int i = 0; i < 10; ++i) s.Record(seq.id, 4, 0);  // never kept
  for (int step = 0; step < 2 * Speculator::kProbeEvery; ++step) {
    s.BeginRound();
    s.Propose(seq, 1, 100, &draft);
    drafted += draft.empty() ? 0 : 1;
  }
  EXPECT_EQ(drafted, 2) << "at batch 1, a sequence whose proposals fail only probes";
}

// Draft mode: DraftLength decides alone, and what the draft model takes per proposal counts
// as cost.
TEST(SpeculatorTest, ADraftModelsTimeCountsAgainstItsProposals) {
  SpeculativeOptions o;
  o.mode = SpeculativeMode::kDraft;
  o.draft_model = "draft.gguf";
  Speculator s(o);
  ObserveCpuLikeSteps(&s);
  const Sequence seq = Repeating();
  for (int i = 0; i < 20; ++i) s.Record(seq.id, 1, 1);
  s.BeginRound();
  EXPECT_EQ(s.DraftLength(seq, 1, 100), 4) << "all kept: 8.5 ms pays 1.25 x 0.8 ms each";
  s.ObserveDraft(4, absl::Milliseconds(40));  // 10 ms per proposal
  EXPECT_NEAR(s.draft_cost(), 0.010, 1e-9);
  s.BeginRound();
  EXPECT_EQ(s.DraftLength(seq, 1, 100), 0) << "8.5 ms does not pay 1.25 x 10.8 ms";
}

}  // namespace
}  // namespace tpserve::coordinator
