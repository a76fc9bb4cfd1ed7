#include "server/engine/draft_verifier.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve::engine {
namespace {

constexpr int64_t kVocab = 8;

// Rows whose argmaxes are `best` (one row per entry), the other logits spread below.
std::vector<float> Rows(const std::vector<int32_t>& best) {
  std::vector<float> logits;
  for (size_t r = 0; r < best.size(); ++r) {
    for (int32_t id = 0; id < kVocab; ++id) {
      logits.push_back(id == best[r] ? 4.0f : 0.3f * static_cast<float>((id * 5 + r) % 7));
    }
  }
  return logits;
}

std::vector<int32_t> Ids(const std::vector<SampleResult>& results) {
  std::vector<int32_t> ids;
  for (const SampleResult& r : results) ids.push_back(r.token_id);
  return ids;
}

std::vector<int32_t> Verify(const std::vector<float>& logits, const SamplingParams& params,
                            const std::vector<int32_t>& draft,
                            absl::Span<const absl::Span<const uint8_t>> allowed = {}) {
  Sampler sampler;
  std::vector<int32_t> scratch;
  std::vector<SampleResult> out;
  const std::vector<int32_t> prompt = {1, 2}, generated = {6};
  VerifyDraft(&sampler, logits, kVocab, params, {prompt, generated}, 1, draft, allowed, &scratch,
              &out);
  return Ids(out);
}

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

TEST(DraftVerifierTest, GreedyAcceptsWhileProposalsEqualTheArgmax) {
  const std::vector<float> logits = Rows({3, 5, 1, 7});
  EXPECT_EQ(Verify(logits, Greedy(), {3, 5, 2}), (std::vector<int32_t>{3, 5, 1}));
  EXPECT_EQ(Verify(logits, Greedy(), {3, 5, 1}), (std::vector<int32_t>{3, 5, 1, 7}));  // + one
  EXPECT_EQ(Verify(logits, Greedy(), {4, 5, 1}), (std::vector<int32_t>{3}));
}

// Seeded, with penalties: the verification draws exactly what plain decoding draws one position
// at a time (the same index, the accepted proposals in the penalty history), whatever is proposed.
TEST(DraftVerifierTest, SeededDrawsEqualPlainDecodingOnePositionAtATime) {
  SamplingParams params;
  params.temperature = 0.9f;
  params.top_p = 0.95f;
  params.seed = 1234;
  params.repetition_penalty = 1.3f;
  params.presence_penalty = 0.4f;
  params.logprobs = 2;
  const std::vector<float> logits = Rows({3, 5, 1, 7, 2});
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    params.seed = seed;
    // Plain decoding: row j after the j tokens drawn before it.
    Sampler plain;
    const std::vector<int32_t> prompt = {1, 2};
    std::vector<int32_t> generated = {6};
    std::vector<SampleResult> expected;
    for (int64_t j = 0; j < 5; ++j) {
      expected.push_back(plain.Sample(absl::MakeConstSpan(logits).subspan(j * kVocab, kVocab),
                                      params, {prompt, generated}, 1 + j));
      generated.push_back(expected.back().token_id);
    }
    const std::vector<int32_t> want = Ids(expected);
    const std::vector<int32_t> all(want.begin(), want.begin() + 4);
    EXPECT_EQ(Verify(logits, params, all), want) << "seed " << seed;
    std::vector<int32_t> wrong = all;
    wrong[2] = (wrong[2] + 1) % kVocab;  // the third proposal differs from the draw
    EXPECT_EQ(Verify(logits, params, wrong), std::vector<int32_t>(want.begin(), want.begin() + 3))
        << "seed " << seed;
    // The log-probabilities are those of plain decoding too.
    Sampler sampler;
    std::vector<int32_t> scratch;
    std::vector<SampleResult> out;
    VerifyDraft(&sampler, logits, kVocab, params, {prompt, {generated.data(), 1}}, 1, all, {},
                &scratch, &out);
    ASSERT_EQ(out.size(), expected.size());
    for (size_t j = 0; j < out.size(); ++j) {
      EXPECT_EQ(out[j].logprob, expected[j].logprob);
      ASSERT_EQ(out[j].top.size(), 2u);
      EXPECT_EQ(out[j].top[1].token_id, expected[j].top[1].token_id);
    }
  }
}

// Under a grammar each row is drawn under its own mask (the grammar's state after the
// proposals before it), as plain decoding would draw that position.
TEST(DraftVerifierTest, EachRowIsDrawnUnderItsOwnMask) {
  const std::vector<float> logits = Rows({3, 5, 1, 7});
  const std::vector<uint8_t> any = {0xFF}, no5 = {0xDF}, only2 = {0x04};
  const std::vector<absl::Span<const uint8_t>> free = {any, any, any, any};
  EXPECT_EQ(Verify(logits, Greedy(), {3, 5, 1}, free), (std::vector<int32_t>{3, 5, 1, 7}));
  // Row 1 may not take 5: its draw is the best allowed token, and the proposal 5 is rejected.
  const std::vector<absl::Span<const uint8_t>> masked = {any, no5, any, any};
  std::vector<int32_t> got = Verify(logits, Greedy(), {3, 5, 1}, masked);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], 3);
  EXPECT_NE(got[1], 5);
  Sampler plain;
  const std::vector<int32_t> prompt = {1, 2}, generated = {6, 3};
  EXPECT_EQ(got[1], plain
                        .Sample(absl::MakeConstSpan(logits).subspan(kVocab, kVocab), Greedy(),
                                {prompt, generated}, 2, no5)
                        .token_id);
  // A proposal its mask forces is accepted though the row's argmax differs.
  const std::vector<absl::Span<const uint8_t>> forced = {any, any, only2, any};
  EXPECT_EQ(Verify(logits, Greedy(), {3, 5, 2}, forced), (std::vector<int32_t>{3, 5, 2, 7}));
}

TEST(DraftVerifierTest, NoProposalIsOnePlainDraw) {
  EXPECT_EQ(Verify(Rows({3}), Greedy(), {}), (std::vector<int32_t>{3}));
}

}  // namespace
}  // namespace tpserve::engine
