#include "server/protocol/step_codec.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve::protocol {
namespace {

constexpr int32_t kVocab = 1000;

engine::SamplingParams Penalised() {
  engine::SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.typical_p = 0.8f;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = -0.25f;
  p.seed = 1234567890123ull;
  p.logprobs = 5;
  return p;
}

// A Step of two sequences: a prefill chunk that does not sample, then a decode that does,
// with penalties (so its history travels).
tpserve::v1::Step TwoSequenceStep() {
  tpserve::v1::Step step;
  const std::vector<int32_t> chunk = {5, 6, 7}, blocks = {3, 1};
  AddStepSequence({.seq_id = 11, .tokens = chunk, .start_pos = 16, .block_table = blocks},
                  engine::SamplingParams(), {}, &step);
  const std::vector<int32_t> token = {9}, table = {0}, prompt = {1, 2}, generated = {3, 4, 9};
  AddStepSequence({.seq_id = 12,
                   .tokens = token,
                   .start_pos = 4,
                   .block_table = table,
                   .sample = true,
                   .sample_index = 3},
                  Penalised(), {prompt, generated}, &step);
  return step;
}

TEST(StepCodecTest, StepRoundTrips) {
  const tpserve::v1::Step step = TwoSequenceStep();
  absl::StatusOr<DecodedStep> d = DecodeStep(step, kVocab);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->batch.sequences.size(), 2u);
  const engine::StepSequence& chunk = d->batch.sequences[0];
  EXPECT_EQ(chunk.tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(chunk.start_pos, 16);
  EXPECT_EQ(chunk.block_table, (std::vector<int32_t>{3, 1}));
  EXPECT_FALSE(chunk.want_logits);
  EXPECT_TRUE(d->batch.sequences[1].want_logits);
  ASSERT_EQ(d->samples.size(), 1u);
  const SampleSpec& s = d->samples[0];
  EXPECT_EQ(s.seq_id, 12u);
  EXPECT_EQ(s.sample_index, 3u);
  const engine::SamplingParams want = Penalised();
  EXPECT_EQ(s.params.temperature, want.temperature);
  EXPECT_EQ(s.params.top_k, want.top_k);
  EXPECT_EQ(s.params.top_p, want.top_p);
  EXPECT_EQ(s.params.min_p, want.min_p);
  EXPECT_EQ(s.params.typical_p, want.typical_p);
  EXPECT_EQ(s.params.repetition_penalty, want.repetition_penalty);
  EXPECT_EQ(s.params.frequency_penalty, want.frequency_penalty);
  EXPECT_EQ(s.params.presence_penalty, want.presence_penalty);
  EXPECT_EQ(s.params.seed, want.seed);
  EXPECT_EQ(s.params.logprobs, want.logprobs);
  EXPECT_EQ(std::vector<int32_t>(s.history.prompt.begin(), s.history.prompt.end()),
            (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(std::vector<int32_t>(s.history.generated.begin(), s.history.generated.end()),
            (std::vector<int32_t>{3, 4, 9}));
}

TEST(StepCodecTest, NoHistoryTravelsWithoutPenalties) {
  tpserve::v1::Step step;
  const std::vector<int32_t> token = {9}, table = {0}, prompt = {1, 2};
  AddStepSequence({.seq_id = 1, .tokens = token, .block_table = table, .sample = true},
                  engine::SamplingParams(), {prompt, {}}, &step);
  EXPECT_EQ(step.sequences(0).penalty_token_ids_size(), 0);
}

// The message of DecodeStep on `step`, which must be refused.
std::string Refusal(const tpserve::v1::Step& step) {
  absl::StatusOr<DecodedStep> d = DecodeStep(step, kVocab);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << d.status();
  return std::string(d.status().message());
}

TEST(StepCodecTest, RefusesHostileSteps) {
  tpserve::v1::Step step = TwoSequenceStep();
  step.mutable_sequences(0)->set_start_pos(1u << 31);
  EXPECT_EQ(Refusal(step), "Step: sequences[0]: start_pos 2147483648 is above 2147483647");

  step = TwoSequenceStep();
  step.mutable_sequences(0)->set_block_table(1, 0xFFFFFFFFu);
  EXPECT_EQ(Refusal(step), "Step: sequences[0]: block_table holds 4294967295, above 2147483647");

  step = TwoSequenceStep();
  step.mutable_sequences(1)->set_seq_id(11);
  EXPECT_EQ(Refusal(step), "Step: sequences[1]: seq_id 11 appears twice");

  const auto with_sampling = [](auto edit) {
    tpserve::v1::Step s = TwoSequenceStep();
    edit(s.mutable_sequences(1)->mutable_sampling());
    return s;
  };
  EXPECT_NE(Refusal(with_sampling([](tpserve::v1::SamplingParams* p) {
              p->set_temperature(std::numeric_limits<float>::quiet_NaN());
            })).find("sequences[1]: sampling: temperature"),
            std::string::npos);
  EXPECT_NE(Refusal(with_sampling([](tpserve::v1::SamplingParams* p) {
              p->set_top_k(-5);
            })).find("top_k must be >= 0, got -5"),
            std::string::npos);
  EXPECT_EQ(
      Refusal(with_sampling([](tpserve::v1::SamplingParams* p) { p->set_logprobs(1000000); })),
      "Step: sequences[1]: sampling: logprobs 1000000 is above the limit of 100");
  EXPECT_NE(Refusal(with_sampling([](tpserve::v1::SamplingParams* p) {
              p->set_top_p(0.0f);
            })).find("top_p"),
            std::string::npos);
}

TEST(StepCodecTest, StepMasksReachTheirSamplesAndAreChecked) {
  tpserve::v1::Step step = TwoSequenceStep();
  step.set_step_id(8);
  std::string mask(kVocab / 8, '\0');
  mask[1] = 0x04;  // token 10 alone
  auto apply = [&](const tpserve::v1::StepMasks& masks) {
    absl::StatusOr<DecodedStep> d = DecodeStep(step, kVocab);
    EXPECT_TRUE(d.ok()) << d.status();
    absl::Status applied = ApplyStepMasks(masks, 8, kVocab, &*d);
    return std::make_pair(applied, applied.ok() ? d->samples[0].allowed.at(0).size() : 0);
  };
  tpserve::v1::StepMasks masks;
  masks.set_step_id(8);
  AddSequenceMask(12, mask, &masks);
  auto [ok, size] = apply(masks);
  EXPECT_TRUE(ok.ok()) << ok;
  EXPECT_EQ(size, mask.size());
  {  // the span views the message's bytes
    absl::StatusOr<DecodedStep> d = DecodeStep(step, kVocab);
    ASSERT_TRUE(ApplyStepMasks(masks, 8, kVocab, &*d).ok());
    EXPECT_EQ(d->samples[0].allowed[0][1], 0x04);
  }
  tpserve::v1::StepMasks other = masks;
  other.set_step_id(9);
  EXPECT_EQ(apply(other).first.message(), "StepMasks: step_id 9 is not the step's, 8");
  other = masks;
  other.mutable_masks(0)->set_seq_id(11);  // in the step, but does not sample
  EXPECT_EQ(apply(other).first.message(),
            "StepMasks: masks[0]: seq_id 11 is not a sampling sequence of step 8");
  other = masks;
  AddSequenceMask(12, mask, &other);
  EXPECT_EQ(apply(other).first.message(),
            "StepMasks: masks[1]: seq_id 12 has a mask at position 0 already");
  other = masks;
  other.mutable_masks(0)->set_position(1);  // it verifies no proposal
  EXPECT_EQ(apply(other).first.message(),
            "StepMasks: masks[0]: seq_id 12: position 1 is past its 0 proposals");
  other = masks;
  other.mutable_masks(0)->set_allowed_tokens(mask.substr(1));
  EXPECT_EQ(apply(other).first.message(),
            "StepMasks: masks[0]: allowed_tokens holds 124 bytes, want 125 (one bit per token)");
  other.mutable_masks(0)->set_allowed_tokens(std::string(kVocab / 8, '\0'));
  EXPECT_EQ(apply(other).first.message(), "StepMasks: masks[0]: allowed_tokens allows no token");
}

TEST(StepCodecTest, ALogprobsLimitNeverExceedsTheVocabulary) {
  tpserve::v1::Step step = TwoSequenceStep();
  step.mutable_sequences(1)->mutable_sampling()->set_logprobs(20);
  EXPECT_TRUE(DecodeStep(step, 20).ok());
  EXPECT_EQ(DecodeStep(step, 19).status().message(),
            "Step: sequences[1]: sampling: logprobs 20 is above the limit of 19");
}

// A StepResult answering TwoSequenceStep: seq 12 drew `id` with tops `top`.
tpserve::v1::StepResult Answer(int32_t id, std::vector<int32_t> top) {
  engine::SampleResult r;
  r.token_id = id;
  r.logprob = -0.5f;
  for (int32_t t : top) r.top.push_back({t, -1.0f});
  tpserve::v1::StepResult result;
  AddSampledToken(12, r, &result);
  return result;
}

TEST(StepCodecTest, SampledTokensRoundTrip) {
  const tpserve::v1::StepResult result = Answer(9, {9, 4, 0});
  EXPECT_TRUE(CheckStepResult(TwoSequenceStep(), result, 0, kVocab).ok());
  const engine::SampleResult r = FromSampledToken(result.tokens(0));
  EXPECT_EQ(r.token_id, 9);
  EXPECT_EQ(r.logprob, -0.5f);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[1].token_id, 4);
}

// The message of CheckStepResult on `result` from `rank`, which must be refused.
std::string Refused(const tpserve::v1::StepResult& result, int rank = 0) {
  const absl::Status s = CheckStepResult(TwoSequenceStep(), result, rank, kVocab);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(StepCodecTest, RefusesHostileResults) {
  EXPECT_EQ(Refused(Answer(1000000, {})),
            "StepResult: tokens[0]: token_id 1000000 is outside the vocabulary [0, 1000)");
  EXPECT_EQ(Refused(Answer(-1, {})),
            "StepResult: tokens[0]: token_id -1 is outside the vocabulary [0, 1000)");
  EXPECT_EQ(Refused(Answer(3, {1, 1000})),
            "StepResult: tokens[0]: top_token_ids holds 1000, outside the vocabulary [0, 1000)");
  EXPECT_EQ(Refused(Answer(3, {1, 2, 3, 4, 5, 6})),
            "StepResult: tokens[0]: 6 top alternatives where 5 were asked for");
  tpserve::v1::StepResult unpaired = Answer(3, {1, 2});
  unpaired.mutable_tokens(0)->add_top_logprobs(-3.0f);
  EXPECT_EQ(Refused(unpaired), "StepResult: tokens[0]: 2 top_token_ids but 3 top_logprobs");
  tpserve::v1::StepResult other = Answer(3, {});
  other.mutable_tokens(0)->set_seq_id(11);
  EXPECT_EQ(Refused(other),
            "StepResult: tokens[0]: seq_id 11 where the Step's sampled sequence 0 is 12");
  tpserve::v1::StepResult extra = Answer(3, {});
  *extra.add_tokens() = extra.tokens(0);
  EXPECT_EQ(Refused(extra),
            "StepResult: 2 tokens, 1 more than the step's sampled sequences and their drafts take");
  EXPECT_EQ(Refused(tpserve::v1::StepResult()), "StepResult: no token for sampled sequence 12");
  EXPECT_EQ(Refused(Answer(3, {}), 1), "StepResult: rank 1 returned 1 tokens; only rank 0 samples");
  EXPECT_TRUE(CheckStepResult(TwoSequenceStep(), tpserve::v1::StepResult(), 1, kVocab).ok());
}

// A decode token with three proposals: 9 then 20, 21, 22.
tpserve::v1::Step DraftStep() {
  tpserve::v1::Step step;
  step.set_step_id(4);
  const std::vector<int32_t> tokens = {9, 20, 21, 22}, table = {0};
  AddStepSequence({.seq_id = 12,
                   .tokens = tokens,
                   .start_pos = 4,
                   .block_table = table,
                   .sample = true,
                   .sample_index = 3,
                   .draft_tokens = 3},
                  engine::SamplingParams(), {}, &step);
  return step;
}

TEST(StepCodecTest, ADraftIsVerifiedOverItsRowsAndChecked) {
  const tpserve::v1::Step step = DraftStep();
  absl::StatusOr<DecodedStep> d = DecodeStep(step, kVocab);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->batch.sequences[0].all_logits);
  EXPECT_EQ(d->batch.num_logit_rows(), 4);
  ASSERT_EQ(d->samples[0].draft.size(), 3u);
  EXPECT_EQ(d->samples[0].draft[0], 20);
  // Greedy rows whose argmaxes are 20, 21, 5, 7: two proposals accepted, then 5.
  engine::Sampler sampler;
  std::vector<float> logits(4 * kVocab, 0.0f);
  const std::vector<int32_t> best = {20, 21, 5, 7};
  for (int r = 0; r < 4; ++r) logits[r * kVocab + best[r]] = 3.0f;
  d->samples[0].params.temperature = 0.0f;
  tpserve::v1::StepResult result;
  ASSERT_TRUE(SampleDecodedStep(*d, logits, kVocab, &sampler, &result).ok());
  ASSERT_EQ(result.tokens_size(), 3);
  EXPECT_EQ(result.tokens(2).token_id(), 5);
  EXPECT_TRUE(CheckStepResult(step, result, 0, kVocab).ok());
  EXPECT_FALSE(
      SampleDecodedStep(*d, absl::MakeConstSpan(logits).first(kVocab), kVocab, &sampler, &result)
          .ok())
      << "one row for a draft of three";

  auto refused = [&](const std::vector<int32_t>& ids) {
    tpserve::v1::StepResult r;
    for (int32_t id : ids) AddSampledToken(12, engine::SampleResult{.token_id = id}, &r);
    return std::string(CheckStepResult(step, r, 0, kVocab).message());
  };
  EXPECT_EQ(refused({20, 21, 22, 7}), "");  // all accepted, and one more
  EXPECT_EQ(refused({6}), "");              // the first proposal rejected
  EXPECT_EQ(refused({20, 6, 7}),
            "StepResult: tokens[1]: 6 is followed by more tokens but is not proposal 21");
  EXPECT_EQ(refused({20, 21}),
            "StepResult: tokens[1]: the last draw, 21, is the proposal, which verification would "
            "have accepted");
  EXPECT_EQ(refused({20, 21, 22, 7, 8}),
            "StepResult: 5 tokens, 1 more than the step's sampled sequences and their drafts take");

  auto decode_refusal = [](tpserve::v1::Step s) {
    return std::string(DecodeStep(s, kVocab).status().message());
  };
  tpserve::v1::Step bad = step;
  bad.mutable_sequences(0)->set_draft_tokens(2);
  EXPECT_EQ(decode_refusal(bad),
            "Step: sequences[0]: draft_tokens 2 with 4 token_ids: want the last token and the "
            "proposals, 3");
  bad.mutable_sequences(0)->set_draft_tokens(17);
  EXPECT_EQ(decode_refusal(bad), "Step: sequences[0]: draft_tokens 17 is above the limit of 16");
  bad = step;
  bad.mutable_sequences(0)->set_sample(false);
  EXPECT_EQ(decode_refusal(bad), "Step: sequences[0]: draft_tokens without sample");
  // Under a grammar, a mask at each verified position: 0 (the row of the last token) to 3.
  tpserve::v1::StepMasks masks;
  masks.set_step_id(4);
  std::string only6(kVocab / 8, '\0');
  only6[0] = 0x40;
  const std::string any(kVocab / 8, '\xff');
  for (uint32_t p : {0, 1, 3}) AddSequenceMask(12, any, &masks, p);
  {
    absl::StatusOr<DecodedStep> m = DecodeStep(step, kVocab);
    EXPECT_EQ(ApplyStepMasks(masks, 4, kVocab, &*m).message(),
              "StepMasks: seq_id 12 has no mask at position 2 of its 4: each is bound or none");
  }
  AddSequenceMask(12, only6, &masks, 2);
  absl::StatusOr<DecodedStep> m = DecodeStep(step, kVocab);
  ASSERT_TRUE(ApplyStepMasks(masks, 4, kVocab, &*m).ok());
  ASSERT_EQ(m->samples[0].allowed.size(), 4u);
  m->samples[0].params.temperature = 0.0f;
  // Rows 20, 21, 5, 7 as above, but row 2 may take 6 alone: 20 and 21 accepted, then 6.
  tpserve::v1::StepResult masked;
  ASSERT_TRUE(SampleDecodedStep(*m, logits, kVocab, &sampler, &masked).ok());
  ASSERT_EQ(masked.tokens_size(), 3);
  EXPECT_EQ(masked.tokens(2).token_id(), 6);
  AddSequenceMask(12, any, &masks, 4);
  m = DecodeStep(step, kVocab);
  EXPECT_EQ(ApplyStepMasks(masks, 4, kVocab, &*m).message(),
            "StepMasks: masks[4]: seq_id 12: position 4 is past its 3 proposals");
}

}  // namespace
}  // namespace tpserve::protocol
