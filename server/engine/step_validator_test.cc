#include "server/engine/step_validator.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve::engine {
namespace {

// A model of 100 tokens of vocabulary, 64 positions of context, 8 KV blocks of 16 tokens,
// 32 tokens and 4 logit rows per step.
constexpr StepLimits kLimits = {.vocab_size = 100,
                                .max_positions = 64,
                                .kv_blocks = 8,
                                .kv_block_size = 16,
                                .max_batch_tokens = 32,
                                .max_logit_rows = 4};

StepSequence Seq(std::vector<int32_t> tokens, int32_t start_pos, std::vector<int32_t> blocks) {
  StepSequence s;
  s.tokens = std::move(tokens);
  s.start_pos = start_pos;
  s.block_table = std::move(blocks);
  return s;
}

// The status of a one-sequence batch; its message must hold `words`.
void ExpectRefused(const StepBatch& batch, const std::string& words) {
  const absl::Status s = ValidateStep(batch, kLimits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(words), std::string::npos) << s;
}

TEST(ValidateStepTest, TakesBatchesAtTheLimits) {
  // Decode at the last position, with the whole context's blocks; token ids 0 and 99.
  EXPECT_TRUE(ValidateStep({{Seq({99}, 63, {0, 1, 2, 7})}}, kLimits).ok());
  // 32 tokens in all over 4 sequences that all want logits.
  StepBatch full;
  for (int s = 0; s < 4; ++s) {
    full.sequences.push_back(Seq(std::vector<int32_t>(8, 0), 0, {static_cast<int32_t>(s)}));
  }
  EXPECT_TRUE(ValidateStep(full, kLimits).ok());
}

TEST(ValidateStepTest, RefusesWhatNoBackendCanRun) {
  ExpectRefused({{Seq({}, 0, {0})}}, "sequence 0: no tokens");
  ExpectRefused({{Seq({100}, 0, {0})}}, "token id 100 is outside the vocabulary [0, 100)");
  ExpectRefused({{Seq({-1}, 0, {0})}}, "token id -1");
  ExpectRefused({{Seq({1}, -1, {0})}}, "positions [-1, 0) leave the context [0, 64)");
  ExpectRefused({{Seq({1}, 64, {0, 1, 2, 3, 4})}}, "positions [64, 65) leave the context");
  ExpectRefused({{Seq({1, 2}, 63, {0, 1, 2, 3})}}, "leave the context");
  ExpectRefused({{Seq({1}, 16, {0})}}, "block table has 1 blocks; positions up to 17 need 2");
  // A table longer than the positions need is fine (engine_probe passes one), its ids checked.
  EXPECT_TRUE(ValidateStep({{Seq({1}, 0, {0, 1, 2, 3, 4, 5})}}, kLimits).ok());
  ExpectRefused({{Seq({1}, 0, {0, 1, 2, 3, 4, 5, 6, 7, 0})}},
                "block table has 9 blocks, more than the cache's 8");
  ExpectRefused({{Seq({1}, 0, std::vector<int32_t>(1 << 20, 0))}},
                "block table has 1048576 blocks");
  ExpectRefused({{Seq({1}, 0, {8})}}, "KV block 8 is outside [0, 8)");
  ExpectRefused({{Seq({1}, 0, {-3})}}, "KV block -3");
  ExpectRefused({}, "a step holds 1 to 32 tokens, got 0");
  ExpectRefused({{Seq(std::vector<int32_t>(33, 1), 0, {0, 1, 2})}}, "1 to 32 tokens, got 33");
  StepBatch rows;
  for (int s = 0; s < 5; ++s) rows.sequences.push_back(Seq({1}, 0, {static_cast<int32_t>(s)}));
  ExpectRefused(rows, "at most 4 logit rows, got 5");
  // The sequence named is the bad one, not the first.
  ExpectRefused({{Seq({1}, 0, {0}), Seq({1}, 0, {9})}}, "sequence 1: KV block 9");
}

}  // namespace
}  // namespace tpserve::engine
