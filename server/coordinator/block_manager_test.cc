// BlockManager: allocation covers exactly the positions asked for, fails without side
// effects when short, and every block comes back exactly once; with prefix caching, full
// blocks are shared by content, evicted in LRU order only when nothing is free, and the
// reference counts and lists stay consistent through random admissions, steps, finishes,
// cancellations and preemptions.
#include "server/coordinator/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace tpserve::coordinator {
namespace {

TEST(BlockManagerTest, GrowsByWholeBlocks) {
  BlockManager m(10, 16);
  std::vector<int32_t> table;
  EXPECT_EQ(m.Missing(1, table), 1);
  ASSERT_TRUE(m.GrowTo(1, &table));
  EXPECT_EQ(table, std::vector<int32_t>({0}));
  ASSERT_TRUE(m.GrowTo(16, &table));  // still one block
  EXPECT_EQ(table.size(), 1u);
  ASSERT_TRUE(m.GrowTo(17, &table));
  EXPECT_EQ(table, std::vector<int32_t>({0, 1}));
  EXPECT_EQ(m.free_blocks(), 8);
  ASSERT_TRUE(m.GrowTo(5, &table));  // shrinking asks for nothing
  EXPECT_EQ(table.size(), 2u);
}

TEST(BlockManagerTest, ShortFreeListChangesNothing) {
  BlockManager m(3, 4);
  std::vector<int32_t> a;
  ASSERT_TRUE(m.GrowTo(8, &a));
  std::vector<int32_t> b = {};
  EXPECT_FALSE(m.GrowTo(9, &b));  // needs 3, 1 free
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(m.free_blocks(), 1);
  m.Release(&a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_TRUE(m.GrowTo(9, &b));
  EXPECT_EQ(m.free_blocks(), 0);
}

TEST(BlockManagerTest, RandomAllocationsNeverShareABlock) {
  BlockManager m(64, 16);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> tables(12);
  std::vector<int64_t> lengths(12, 0);
  for (int round = 0; round < 5000; ++round) {
    const size_t i = rng() % tables.size();
    if (rng() % 4 == 0) {
      m.Release(&tables[i]);
      lengths[i] = 0;
    } else {
      const int64_t want = lengths[i] + 1 + static_cast<int64_t>(rng() % 40);
      if (m.GrowTo(want, &tables[i])) lengths[i] = want;
    }
    std::set<int32_t> seen;
    int64_t held = 0;
    for (size_t t = 0; t < tables.size(); ++t) {
      EXPECT_EQ(static_cast<int64_t>(tables[t].size()), m.BlocksFor(lengths[t]));
      for (int32_t b : tables[t]) {
        EXPECT_TRUE(seen.insert(b).second) << "block " << b << " held twice";
        EXPECT_GE(b, 0);
        EXPECT_LT(b, 64);
      }
      held += static_cast<int64_t>(tables[t].size());
    }
    ASSERT_EQ(held + m.free_blocks(), 64);
  }
}

Sequence Seq(uint64_t id, std::vector<int32_t> prompt) {
  Sequence s;
  s.id = id;
  s.prompt = std::move(prompt);
  return s;
}

// What the scheduler does for a sequence: share its cached prefix, grow over the rest,
// compute it and cache its full blocks.
int64_t Admit(BlockManager* m, Sequence* s) {
  const int64_t cached = m->MatchPrefix(s, s->length() - 1);
  EXPECT_TRUE(m->GrowTo(s->length(), &s->block_table));
  s->computed = s->length();
  m->Register(s);
  return cached;
}

TEST(BlockManagerCacheTest, SharesFullBlocksOfACommonPrefixOnly) {
  BlockManager m(16, 4, /*prefix_caching=*/true);
  Sequence a = Seq(1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});  // blocks [1-4] [5-8] [9 10]
  EXPECT_EQ(Admit(&m, &a), 0);
  EXPECT_EQ(m.cached_blocks(), 2);                   // the partial third block is not cached
  Sequence b = Seq(2, {1, 2, 3, 4, 5, 6, 7, 0, 9});  // shares only the first block
  EXPECT_EQ(Admit(&m, &b), 4);
  EXPECT_EQ(b.block_table[0], a.block_table[0]);
  EXPECT_NE(b.block_table[1], a.block_table[1]);
  EXPECT_EQ(m.refs(a.block_table[0]), 2);
  Sequence c = Seq(3, {1, 2, 3, 4, 5, 6, 7, 8});  // all cached, but its last must be computed
  EXPECT_EQ(Admit(&m, &c), 4);
  EXPECT_TRUE(m.CheckInvariants().ok()) << m.CheckInvariants();
}

TEST(BlockManagerCacheTest, OffSharesNothing) {
  BlockManager m(16, 4);
  Sequence a = Seq(1, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Sequence b = Seq(2, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(Admit(&m, &a), 0);
  EXPECT_EQ(Admit(&m, &b), 0);
  EXPECT_EQ(m.cached_blocks(), 0);
}

TEST(BlockManagerCacheTest, ReleasedBlocksStayCachedThenGoLeastRecentlyUsedFirst) {
  BlockManager m(4, 2, /*prefix_caching=*/true);
  Sequence a = Seq(1, {1, 2, 3, 4, 9});  // blocks [1 2] [3 4] [9]
  Admit(&m, &a);
  m.Release(&a.block_table);
  EXPECT_EQ(m.free_blocks(), 4);  // evictable counts as free
  EXPECT_EQ(m.cached_blocks(), 2);
  Sequence again = Seq(2, {1, 2, 3, 4, 7});
  EXPECT_EQ(Admit(&m, &again), 4);  // both found after the release
  m.Release(&again.block_table);
  // Two blocks were never cached: they go first; the third is the least recently used
  // cached one, the tail block [3 4] (released before the head).
  std::vector<int32_t> other;
  ASSERT_TRUE(m.GrowTo(4, &other));
  EXPECT_EQ(m.evictions(), 0);
  ASSERT_TRUE(m.GrowTo(6, &other));
  EXPECT_EQ(m.evictions(), 1);
  Sequence head = Seq(3, {1, 2, 3, 4, 5});
  EXPECT_EQ(m.MatchPrefix(&head, 4), 2);  // [1 2] still cached, [3 4] gone
  EXPECT_TRUE(m.CheckInvariants().ok()) << m.CheckInvariants();
}

TEST(BlockManagerCacheTest, AFailedGrowthAfterAMatchChangesNothingOnRelease) {
  BlockManager m(3, 2, /*prefix_caching=*/true);
  Sequence a = Seq(1, {1, 2, 3});
  Admit(&m, &a);
  Sequence b = Seq(2, {1, 2, 5, 6, 7, 8, 9, 10});
  EXPECT_EQ(m.MatchPrefix(&b, b.length() - 1), 2);
  EXPECT_FALSE(m.GrowTo(b.length(), &b.block_table));  // needs 3 more, 1 free
  m.Release(&b.block_table);
  EXPECT_EQ(m.refs(a.block_table[0]), 1);
  EXPECT_TRUE(m.CheckInvariants().ok()) << m.CheckInvariants();
}

// Random admissions (prompts from a few shared prefixes), chunked steps, finishes,
// cancellations and preemptions; after every operation the lists and counts agree, every
// block's reference count equals the tables holding it, and a shared block's content is the
// same in every table that holds it.
TEST(BlockManagerCacheTest, RandomOperationsKeepTheInvariants) {
  constexpr int64_t kBlocks = 48, kBlockSize = 4;
  BlockManager m(kBlocks, kBlockSize, /*prefix_caching=*/true);
  std::mt19937 rng(11);
  std::vector<Sequence> seqs(10);
  std::vector<bool> live(seqs.size(), false);
  std::map<int32_t, std::vector<int32_t>> content;  // block → the tokens cached in it
  std::vector<int> unheld_since(kBlocks, -1);       // the round a block was last let go
  std::vector<bool> was_held(kBlocks, false);
  int64_t hits = 0;
  for (int round = 0; round < 20000; ++round) {
    const size_t i = rng() % seqs.size();
    Sequence& s = seqs[i];
    const int op = static_cast<int>(rng() % 8);
    if (!live[i]) {  // admit a new sequence: one of 3 prefixes, then its own tokens
      s = Seq(round, {});
      const int prefix = static_cast<int>(rng() % 3);
      for (int t = 0; t < 9 + prefix * 3; ++t) s.prompt.push_back(100 * prefix + t);
      for (int t = static_cast<int>(rng() % 12); t >= 0; --t) {
        s.prompt.push_back(static_cast<int32_t>(rng() % 50));
      }
      const int64_t cached = m.MatchPrefix(&s, s.length() - 1);
      hits += cached;
      if (!m.GrowTo(cached + 1, &s.block_table)) {
        m.Release(&s.block_table);
      } else {
        s.computed = cached;
        live[i] = true;
      }
    } else if (op == 0) {  // finish or cancel
      m.Release(&s.block_table);
      live[i] = false;
    } else if (op == 1) {  // preempt
      m.Release(&s.block_table);
      s.block_keys.clear();
      s.computed = 0;
      live[i] = false;
    } else {  // one step: a chunk of the prompt, or a generated token
      if (s.computed == s.length()) s.generated.push_back(static_cast<int32_t>(rng() % 50));
      const int64_t next = std::min(s.length(), s.computed + 1 + static_cast<int64_t>(rng() % 6));
      if (m.GrowTo(next, &s.block_table)) {
        s.computed = next;
        m.Register(&s);
      }
    }
    ASSERT_TRUE(m.CheckInvariants().ok()) << "round " << round << ": " << m.CheckInvariants();
    std::map<int32_t, int> holders;
    for (size_t j = 0; j < seqs.size(); ++j) {
      if (!live[j]) continue;
      for (size_t k = 0; k < seqs[j].block_table.size(); ++k) {
        const int32_t b = seqs[j].block_table[k];
        ++holders[b];
        if (static_cast<int64_t>(k + 1) * kBlockSize > seqs[j].computed) continue;
        std::vector<int32_t> tokens;
        for (int64_t p = 0; p < kBlockSize; ++p) {
          tokens.push_back(seqs[j].token_at(static_cast<int64_t>(k) * kBlockSize + p));
        }
        auto [it, fresh] = content.emplace(b, tokens);
        if (!fresh && holders[b] > 1) {
          ASSERT_EQ(it->second, tokens) << "block " << b << " shared with other content";
        }
        it->second = tokens;
      }
    }
    for (int32_t b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(m.refs(b), holders.count(b) ? holders[b] : 0) << "block " << b;
      const bool held = holders.count(b) > 0;
      if (was_held[b] && !held) unheld_since[b] = round;
      was_held[b] = held;
    }
    // LRU: the evictable blocks go in the order they were let go, the longest unheld first.
    const std::vector<int32_t> order = m.EvictionOrder();
    for (size_t k = 1; k < order.size(); ++k) {
      ASSERT_LE(unheld_since[order[k - 1]], unheld_since[order[k]])
          << "round " << round << ": block " << order[k - 1] << " (let go in round "
          << unheld_since[order[k - 1]] << ") would be evicted before block " << order[k]
          << " (round " << unheld_since[order[k]] << ")";
    }
  }
  EXPECT_GT(hits, 0);
  EXPECT_GT(m.evictions(), 0);
}

}  // namespace
}  // namespace tpserve::coordinator
