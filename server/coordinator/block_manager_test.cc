// BlockManager: allocation covers exactly the positions asked for, fails without side
// effects when short, and every block comes back exactly once.
#include "server/coordinator/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
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

}  // namespace
}  // namespace tpserve::coordinator
