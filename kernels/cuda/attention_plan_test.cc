// CPU-only tests of PlanAttention: no GPU needed.
#include "kernels/cuda/attention_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tpserve::cuda {
namespace {

// Checks the decode entry `d` of `plan` for a sequence with `context` keys: split count in
// [1, max_splits], boundaries at multiples of block_size, the splits covering exactly
// [0, context) with none empty.
void ExpectValidSplits(const AttentionPlan& plan, int d, int32_t context,
                       const AttentionPlanOptions& opt) {
  const int32_t splits = plan.decode_splits[d];
  const int32_t split_keys = plan.decode_split_keys[d];
  ASSERT_GE(splits, 1);
  ASSERT_LE(splits, opt.max_splits);
  ASSERT_LE(splits, plan.max_splits);
  EXPECT_EQ(split_keys % opt.block_size, 0) << "context " << context;
  EXPECT_GE(split_keys, opt.block_size);
  int32_t covered = 0;
  for (int32_t s = 0; s < splits; ++s) {
    const int32_t begin = s * split_keys;
    const int32_t end = std::min(context, begin + split_keys);
    EXPECT_EQ(begin, covered) << "context " << context << " split " << s;
    EXPECT_LT(begin, end) << "empty split " << s << " of context " << context;
    covered = end;
  }
  EXPECT_EQ(covered, context);
}

TEST(AttentionPlanTest, SequenceOffsetsAreRunningSums) {
  const AttentionPlan plan = PlanAttention({3, 1, 20, 1}, {0, 7, 5, 0}, {});
  EXPECT_EQ(plan.seq_q_start, (std::vector<int32_t>{0, 3, 4, 24}));
  EXPECT_EQ(plan.seq_num_tokens, (std::vector<int32_t>{3, 1, 20, 1}));
  EXPECT_EQ(plan.seq_start_pos, (std::vector<int32_t>{0, 7, 5, 0}));
  EXPECT_EQ(plan.decode_seqs, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(plan.num_decode(), 2);
}

TEST(AttentionPlanTest, ShortContextsHaveOneSplit) {
  AttentionPlanOptions opt;  // min_split_keys 256, max_splits 16, block_size 16
  for (int32_t context : {1, 2, 15, 16, 17, 255, 256}) {
    const AttentionPlan plan = PlanAttention({1}, {context - 1}, opt);
    ASSERT_EQ(plan.num_decode(), 1);
    EXPECT_EQ(plan.decode_splits[0], 1) << "context " << context;
    EXPECT_EQ(plan.max_splits, 1);
    ExpectValidSplits(plan, 0, context, opt);
  }
}

TEST(AttentionPlanTest, LongContextsAreSplit) {
  AttentionPlanOptions opt;
  struct Case {
    int32_t context, splits, split_keys;
  };
  for (const Case& c : {Case{257, 2, 144}, Case{300, 2, 160}, Case{3000, 12, 256},
                        Case{9000, 16, 576}, Case{100000, 16, 6256}}) {
    const AttentionPlan plan = PlanAttention({1}, {c.context - 1}, opt);
    ASSERT_EQ(plan.num_decode(), 1);
    EXPECT_EQ(plan.decode_splits[0], c.splits) << "context " << c.context;
    EXPECT_EQ(plan.decode_split_keys[0], c.split_keys) << "context " << c.context;
    EXPECT_EQ(plan.max_splits, c.splits);
    ExpectValidSplits(plan, 0, c.context, opt);
  }
}

TEST(AttentionPlanTest, SplitsCoverEveryContextExactly) {
  for (int32_t block_size : {1, 8, 16, 32}) {
    for (int32_t min_split_keys : {1, 7, 64, 256}) {
      AttentionPlanOptions opt;
      opt.block_size = block_size;
      opt.min_split_keys = min_split_keys;
      opt.max_splits = 8;
      for (int32_t context = 1; context <= 1200; context += (context < 100 ? 1 : 37)) {
        const AttentionPlan plan = PlanAttention({1}, {context - 1}, opt);
        ASSERT_EQ(plan.num_decode(), 1);
        ExpectValidSplits(plan, 0, context, opt);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(AttentionPlanTest, PrefillTilesCoverEveryTokenOnce) {
  AttentionPlanOptions opt;
  opt.prefill_tile_queries = 16;
  const std::vector<int32_t> num_tokens = {2, 16, 17, 1, 100, 33};
  const std::vector<int32_t> start_pos = {0, 5, 0, 9, 40, 16};
  const AttentionPlan plan = PlanAttention(num_tokens, start_pos, opt);
  std::vector<std::vector<int>> seen(num_tokens.size());
  for (size_t s = 0; s < num_tokens.size(); ++s) seen[s].assign(num_tokens[s], 0);
  for (int tile = 0; tile < plan.num_prefill_tiles(); ++tile) {
    const int32_t s = plan.prefill_tile_seq[tile];
    const int32_t first = plan.prefill_tile_first[tile];
    ASSERT_GE(s, 0);
    ASSERT_LT(s, static_cast<int32_t>(num_tokens.size()));
    ASSERT_GT(num_tokens[s], 1) << "a decode sequence got a prefill tile";
    ASSERT_GE(first, 0);
    ASSERT_LT(first, num_tokens[s]);
    EXPECT_EQ(first % opt.prefill_tile_queries, 0);
    const int32_t last = std::min(num_tokens[s], first + opt.prefill_tile_queries);
    for (int32_t i = first; i < last; ++i) ++seen[s][i];
  }
  for (size_t s = 0; s < num_tokens.size(); ++s) {
    const int expected = num_tokens[s] > 1 ? 1 : 0;  // decode tokens are not in tiles
    for (int32_t i = 0; i < num_tokens[s]; ++i) {
      EXPECT_EQ(seen[s][i], expected) << "seq " << s << " token " << i;
    }
  }
  // 1 + 1 + 2 + 7 + 3 tiles.
  EXPECT_EQ(plan.num_prefill_tiles(), 14);
  EXPECT_EQ(plan.num_decode(), 1);
}

TEST(AttentionPlanTest, DecodeSplitsDoNotDependOnTheBatch) {
  AttentionPlanOptions opt;
  const std::vector<int32_t> contexts = {1, 17, 300, 3000, 9000};
  for (size_t i = 0; i < contexts.size(); ++i) {
    const AttentionPlan alone = PlanAttention({1}, {contexts[i] - 1}, opt);
    // The same sequence among other decodes and prefill chunks, in the middle of the batch.
    std::vector<int32_t> num_tokens = {40, 1, 1};
    std::vector<int32_t> start_pos = {0, 9999, 5};
    num_tokens.push_back(1);
    start_pos.push_back(contexts[i] - 1);
    num_tokens.push_back(7);
    start_pos.push_back(100);
    const AttentionPlan batch = PlanAttention(num_tokens, start_pos, opt);
    ASSERT_EQ(batch.num_decode(), 3);
    EXPECT_EQ(batch.decode_seqs[2], 3);
    EXPECT_EQ(batch.decode_splits[2], alone.decode_splits[0]) << "context " << contexts[i];
    EXPECT_EQ(batch.decode_split_keys[2], alone.decode_split_keys[0]);
    EXPECT_EQ(batch.max_splits, 16);  // the 10000-key sequence
  }
}

TEST(AttentionPlanTest, PrefillTilesDoNotDependOnTheBatch) {
  AttentionPlanOptions opt;
  opt.prefill_tile_queries = 8;
  const AttentionPlan alone = PlanAttention({21}, {3}, opt);
  const AttentionPlan batch = PlanAttention({1, 5, 21, 1}, {50, 0, 3, 7}, opt);
  std::vector<int32_t> firsts;
  for (int tile = 0; tile < batch.num_prefill_tiles(); ++tile) {
    if (batch.prefill_tile_seq[tile] == 2) firsts.push_back(batch.prefill_tile_first[tile]);
  }
  EXPECT_EQ(firsts, alone.prefill_tile_first);
  EXPECT_EQ(firsts, (std::vector<int32_t>{0, 8, 16}));
}

TEST(AttentionPlanTest, EmptyStepAndNoDecode) {
  const AttentionPlan empty = PlanAttention({}, {}, {});
  EXPECT_EQ(empty.num_decode(), 0);
  EXPECT_EQ(empty.num_prefill_tiles(), 0);
  EXPECT_EQ(empty.max_splits, 0);
  const AttentionPlan prefill = PlanAttention({4}, {0}, {});
  EXPECT_EQ(prefill.max_splits, 0);
  EXPECT_EQ(prefill.num_prefill_tiles(), 1);
}

}  // namespace
}  // namespace tpserve::cuda
