#include "server/model/plan/shard_plan.h"

#include <gtest/gtest.h>

#include <set>

#include "absl/strings/str_cat.h"

namespace tpserve::model {
namespace {

ModelConfig SmolLm2Shape() {
  ModelConfig c;
  c.vocab_size = 49152;
  c.d_model = 576;
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.ffn_dim = 1536;
  return c;
}

// What the attention kernels need of a rank's heads: each of its KV heads read by the same
// number of its query heads, in order.
void ExpectEvenGroups(const ShardPlan& p) {
  const int64_t q = p.q_heads_count(), kv = p.kv_heads_count();
  ASSERT_TRUE(kv > 0 && q % kv == 0) << p.DebugString();
  for (int64_t h = 0; h < q; ++h) EXPECT_EQ(p.LocalKvHead(h), h / (q / kv)) << p.DebugString();
}

// Every query head, FFN column and vocab row is owned by exactly one rank; each rank holds
// the KV heads its query heads read, in even groups; sizes differ by at most one unit (one KV
// group when whole groups are split, or when splitting the query heads evenly would make
// uneven groups).
void ExpectPartition(const ModelConfig& c, int world) {
  std::vector<int> q_owner(c.n_heads, 0), ffn_owner(c.ffn_dim, 0);
  std::vector<int> vocab_owner(c.vocab_size, 0);
  int64_t min_q = c.n_heads, max_q = 0;
  for (int r = 0; r < world; ++r) {
    auto plan = MakeShardPlan(c, r, world);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_GT(plan->q_heads_count(), 0) << plan->DebugString();
    ExpectEvenGroups(*plan);
    for (int64_t h = plan->q_heads.begin; h < plan->q_heads.end; ++h) {
      ++q_owner[h];
      const int64_t kv = h / plan->group_size;
      EXPECT_GE(kv, plan->kv_heads.begin) << plan->DebugString();
      EXPECT_LT(kv, plan->kv_heads.end) << plan->DebugString();
      EXPECT_EQ(plan->LocalKvHead(h - plan->q_heads.begin), kv - plan->kv_heads.begin);
    }
    for (int64_t i = plan->ffn.begin; i < plan->ffn.end; ++i) ++ffn_owner[i];
    for (int64_t i = plan->vocab.begin; i < plan->vocab.end; ++i) ++vocab_owner[i];
    min_q = std::min(min_q, plan->q_heads_count());
    max_q = std::max(max_q, plan->q_heads_count());
    if (c.ffn_dim % 32 == 0) EXPECT_EQ(plan->ffn.begin % 32, 0);
  }
  for (int v : q_owner) EXPECT_EQ(v, 1);
  for (int v : ffn_owner) EXPECT_EQ(v, 1);
  for (int v : vocab_owner) EXPECT_EQ(v, 1);
  EXPECT_LE(max_q - min_q, c.n_heads / c.n_kv_heads);
}

TEST(ShardPlanTest, SmolLm2AtEveryWorldSize) {
  for (int world = 1; world <= 9; ++world) {
    SCOPED_TRACE(world);
    ExpectPartition(SmolLm2Shape(), world);
  }
}

TEST(ShardPlanTest, WorldOfTwoSplitsKvHeadsUnevenly) {
  auto r0 = MakeShardPlan(SmolLm2Shape(), 0, 2);
  auto r1 = MakeShardPlan(SmolLm2Shape(), 1, 2);
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_EQ(r0->kv_heads, (Range{0, 2}));
  EXPECT_EQ(r0->q_heads, (Range{0, 6}));
  EXPECT_EQ(r1->kv_heads, (Range{2, 3}));
  EXPECT_EQ(r1->q_heads, (Range{6, 9}));
  EXPECT_EQ(r0->ffn, (Range{0, 768}));
  EXPECT_EQ(r1->vocab, (Range{24576, 49152}));
}

TEST(ShardPlanTest, WorldOfFourReplicatesKvHeads) {
  // 9 query heads over 4 ranks: 3, 2, 2, 2. Rank 2 owns heads 5 and 6, which read KV heads
  // 1 and 2; rank 1 (heads 3, 4) reads KV head 1 too.
  std::vector<Range> q, kv;
  for (int r = 0; r < 4; ++r) {
    auto p = MakeShardPlan(SmolLm2Shape(), r, 4);
    ASSERT_TRUE(p.ok());
    q.push_back(p->q_heads);
    kv.push_back(p->kv_heads);
  }
  EXPECT_EQ(q, (std::vector<Range>{{0, 3}, {3, 5}, {5, 7}, {7, 9}}));
  EXPECT_EQ(kv, (std::vector<Range>{{0, 1}, {1, 2}, {1, 3}, {2, 3}}));
}

TEST(ShardPlanTest, QueryHeadsAreNotSplitIntoUnevenGroups) {
  // 8 query heads, 2 KV heads, 3 ranks: an even split (3, 3, 2) would give rank 1 heads 3-5,
  // reading KV heads 0, 0 and 1, which no attention kernel serves. Each KV head's group goes
  // to ranks of its own instead: KV head 0 to ranks 0 and 1, KV head 1 to rank 2.
  ModelConfig c = SmolLm2Shape();
  c.n_heads = 8;
  c.n_kv_heads = 2;
  std::vector<Range> q, kv;
  for (int r = 0; r < 3; ++r) {
    auto p = MakeShardPlan(c, r, 3);
    ASSERT_TRUE(p.ok());
    q.push_back(p->q_heads);
    kv.push_back(p->kv_heads);
  }
  EXPECT_EQ(q, (std::vector<Range>{{0, 2}, {2, 4}, {4, 8}}));
  EXPECT_EQ(kv, (std::vector<Range>{{0, 1}, {0, 1}, {1, 2}}));
}

TEST(ShardPlanTest, EveryHeadShapeAtEveryWorldSize) {
  for (int heads : {1, 2, 4, 6, 8, 9, 12, 14, 16, 24, 32, 40}) {
    for (int kv = 1; kv <= heads; ++kv) {
      if (heads % kv != 0) continue;
      ModelConfig c = SmolLm2Shape();
      c.n_heads = heads;
      c.n_kv_heads = kv;
      for (int world = 1; world <= heads; ++world) {
        SCOPED_TRACE(absl::StrCat(heads, " heads, ", kv, " KV heads, ", world, " ranks"));
        ExpectPartition(c, world);
      }
    }
  }
}

TEST(ShardPlanTest, OtherShapes) {
  ModelConfig llama8b;
  llama8b.vocab_size = 128256;
  llama8b.n_heads = 32;
  llama8b.n_kv_heads = 8;
  llama8b.head_dim = 128;
  llama8b.ffn_dim = 14336;
  for (int world : {1, 2, 3, 4, 8, 16, 32}) ExpectPartition(llama8b, world);
  ModelConfig odd;
  odd.vocab_size = 1001;
  odd.n_heads = 6;
  odd.n_kv_heads = 6;
  odd.head_dim = 8;
  odd.ffn_dim = 100;  // not a multiple of 32: split by single columns
  for (int world : {1, 4, 5, 6}) ExpectPartition(odd, world);
}

TEST(ShardPlanTest, RefusesImpossibleWorlds) {
  EXPECT_EQ(MakeShardPlan(SmolLm2Shape(), 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeShardPlan(SmolLm2Shape(), 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto too_big = MakeShardPlan(SmolLm2Shape(), 0, 10);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("attention heads"), std::string::npos);
}

}  // namespace
}  // namespace tpserve::model
