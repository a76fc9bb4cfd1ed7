#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/attention.h"
#include "kernels/cpu/test_util.h"

namespace tpserve::kernels::cpu {
namespace {

using testing::BitEqual;
using testing::kUnitRoundoff;
using testing::RandomVector;

// A layer's cache plus one sequence's K/V written into it through a block table.
struct Fixture {
  Fixture(int64_t num_blocks, int64_t block_size, int64_t n_kv, int64_t hd)
      : k(num_blocks * block_size * n_kv * hd, NAN), v(k.size(), NAN) {
    cache = PagedKvCache{k.data(), v.data(), num_blocks, block_size, n_kv, hd};
  }
  std::vector<float> k;  // [num_blocks, block_size, n_kv, hd]
  std::vector<float> v;
  PagedKvCache cache;
};

// Block table of `n` distinct blocks out of `num_blocks`, shuffled (or 0..n-1 in order).
std::vector<int32_t> BlockTable(int64_t n, int64_t num_blocks, bool shuffle, uint32_t seed) {
  std::vector<int32_t> all(num_blocks);
  std::iota(all.begin(), all.end(), 0);
  if (shuffle) std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  return std::vector<int32_t>(all.begin(), all.begin() + n);
}

// Bound on |out - ref|, v in [-1, 1]: a score error of e (dot in ceil(hd/8)+4 roundings on
// |q.k| <= hd * max|q| * max|k|, then * scale) changes each weight by ~2e relatively; the
// float exp adds 2 ulp and the running sums over ctx positions ctx * u; the final scaling 2 u.
double Tolerance(int64_t hd, float scale, int64_t ctx) {
  const double score_err = (static_cast<double>(hd) / 8.0 + 6.0) * kUnitRoundoff * hd * scale;
  return 2.0 * score_err + (static_cast<double>(ctx) + 16.0) * kUnitRoundoff;
}

void CheckAgainstReference(int64_t n_heads, int64_t n_kv, int64_t hd, int64_t block_size,
                           int32_t start_pos, int64_t t, ThreadPool* pool) {
  const int64_t ctx = start_pos + t;
  const int64_t n_blocks = (ctx + block_size - 1) / block_size;
  Fixture f(n_blocks + 5, block_size, n_kv, hd);
  const std::vector<int32_t> table = BlockTable(n_blocks, n_blocks + 5, true, 7);
  const std::vector<float> k = RandomVector(ctx * n_kv * hd, 1);   // [ctx, n_kv, hd]
  const std::vector<float> v = RandomVector(ctx * n_kv * hd, 2);   // [ctx, n_kv, hd]
  const std::vector<float> q = RandomVector(t * n_heads * hd, 3);  // [t, n_heads, hd]
  KvCacheWrite(k.data(), v.data(), table.data(), n_blocks, 0, ctx, f.cache);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> out(t * n_heads * hd), ref(out.size());
  PagedAttention(&q[0], t, start_pos, table.data(), n_blocks, f.cache, n_heads, scale, out.data(),
                 pool);
  reference::PagedAttention(&q[0], t, start_pos, table.data(), f.cache, n_heads, scale, ref.data());
  const double tol = Tolerance(hd, scale, ctx);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], ref[i], tol) << "hd=" << hd << " bs=" << block_size
                                     << " start=" << start_pos << " t=" << t << " i=" << i;
  }
}

TEST(AttentionTest, MatchesReference) {
  ThreadPool pool(2);
  for (int64_t hd : {64, 3, 17}) {
    for (int64_t bs : {16, 1, 5}) {
      CheckAgainstReference(9, 3, hd, bs, 0, 1, &pool);    // first token
      CheckAgainstReference(9, 3, hd, bs, 0, 17, &pool);   // prefill
      CheckAgainstReference(9, 3, hd, bs, 40, 1, &pool);   // decode
      CheckAgainstReference(4, 1, hd, bs, 63, 23, &pool);  // chunked prefill, MQA
      CheckAgainstReference(2, 2, hd, bs, 576, 3, &pool);  // MHA, longer context
    }
  }
}

// Prefill of T tokens in one call == T decode steps of one token each, bit for bit; and the same
// sequence in shuffled blocks == contiguous blocks, bit for bit.
TEST(AttentionTest, BatchAndLayoutInvariant) {
  const int64_t n_heads = 9, n_kv = 3, hd = 64, bs = 16, t = 77;
  const int64_t n_blocks = (t + bs - 1) / bs;
  const std::vector<float> k = RandomVector(t * n_kv * hd, 11);
  const std::vector<float> v = RandomVector(t * n_kv * hd, 12);
  const std::vector<float> q = RandomVector(t * n_heads * hd, 13);
  const float scale = 0.125f;
  const int64_t row = n_heads * hd;

  Fixture contiguous(n_blocks, bs, n_kv, hd), shuffled(n_blocks + 9, bs, n_kv, hd);
  const std::vector<int32_t> in_order = BlockTable(n_blocks, n_blocks, false, 0);
  const std::vector<int32_t> scattered = BlockTable(n_blocks, n_blocks + 9, true, 99);
  KvCacheWrite(k.data(), v.data(), in_order.data(), n_blocks, 0, t, contiguous.cache);
  // Written in uneven pieces, as chunked prefill + decode would.
  KvCacheWrite(k.data(), v.data(), scattered.data(), n_blocks, 0, 30, shuffled.cache);
  KvCacheWrite(&k[30 * n_kv * hd], &v[30 * n_kv * hd], scattered.data(), n_blocks, 30, t - 30,
               shuffled.cache);

  ThreadPool pool(2);
  std::vector<float> prefill(t * row), pieces(t * row), decode(t * row);
  PagedAttention(q.data(), t, 0, in_order.data(), n_blocks, contiguous.cache, n_heads, scale,
                 prefill.data(), &pool);
  PagedAttention(q.data(), 30, 0, scattered.data(), n_blocks, shuffled.cache, n_heads, scale,
                 pieces.data(), nullptr);
  PagedAttention(&q[30 * row], t - 30, 30, scattered.data(), n_blocks, shuffled.cache, n_heads,
                 scale, &pieces[30 * row], &pool);
  for (int64_t i = 0; i < t; ++i) {
    PagedAttention(&q[i * row], 1, static_cast<int32_t>(i), in_order.data(), n_blocks,
                   contiguous.cache, n_heads, scale, &decode[i * row], &pool);
  }
  EXPECT_TRUE(BitEqual(prefill.data(), decode.data(), t * row));
  EXPECT_TRUE(BitEqual(prefill.data(), pieces.data(), t * row));
}

// Several sequences in one batched call == each sequence alone, for 1..3 threads.
TEST(AttentionTest, BatchedEntryMatchesPerSequenceCalls) {
  const int64_t n_heads = 9, n_kv = 3, hd = 64, bs = 16;
  const std::vector<int64_t> lens = {1, 130, 1, 1, 45, 1};  // new tokens per sequence
  const std::vector<int32_t> starts = {200, 0, 17, 0, 80, 511};
  const int64_t row = n_heads * hd;
  Fixture f(200, bs, n_kv, hd);
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSequence> seqs;
  std::vector<float> q;
  int next_block = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    const int64_t ctx = starts[s] + lens[s];
    const int64_t nb = (ctx + bs - 1) / bs;
    std::vector<int32_t> table(nb);
    for (int64_t b = 0; b < nb; ++b) table[b] = next_block++;
    std::reverse(table.begin(), table.end());
    const std::vector<float> k = RandomVector(ctx * n_kv * hd, 100 + s);
    const std::vector<float> v = RandomVector(ctx * n_kv * hd, 200 + s);
    KvCacheWrite(k.data(), v.data(), table.data(), nb, 0, ctx, f.cache);
    const std::vector<float> qs = RandomVector(lens[s] * row, 300 + s);
    q.insert(q.end(), qs.begin(), qs.end());
    tables.push_back(std::move(table));
  }
  for (size_t s = 0; s < lens.size(); ++s) {
    seqs.push_back({lens[s], starts[s], tables[s].data(), static_cast<int64_t>(tables[s].size())});
  }
  std::vector<float> expected(q.size());
  int64_t offset = 0;
  for (const AttentionSequence& s : seqs) {
    PagedAttention(&q[offset * row], s.num_tokens, s.start_pos, s.block_table, s.num_blocks,
                   f.cache, n_heads, 0.125f, &expected[offset * row], nullptr);
    offset += s.num_tokens;
  }
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> out(q.size());
    PagedAttentionBatch(q.data(), seqs.data(), static_cast<int64_t>(seqs.size()), f.cache, n_heads,
                        0.125f, out.data(), &pool);
    EXPECT_TRUE(BitEqual(out.data(), expected.data(), static_cast<int64_t>(q.size())))
        << threads << " threads";
  }
}

// A sliding window: against the reference; prefill == decode steps bit for bit; a window at
// least the context == no window bit for bit; and the blocks wholly before every token's window
// are never read (their table entries point at an unwritten block of NaNs).
TEST(AttentionTest, SlidingWindow) {
  ThreadPool pool(2);
  const int64_t n_heads = 4, n_kv = 1, hd = 32;
  for (int64_t bs : {16, 5}) {
    for (int64_t window : {1, 5, 16, 37}) {
      for (auto [start, t] : {std::pair<int32_t, int64_t>{0, 1}, {0, 40}, {60, 1}, {63, 23}}) {
        const int64_t ctx = start + t;
        const int64_t n_blocks = (ctx + bs - 1) / bs;
        Fixture f(n_blocks + 1, bs, n_kv, hd);  // block n_blocks: never written (NaN)
        std::vector<int32_t> table = BlockTable(n_blocks, n_blocks, true, 5);
        const std::vector<float> k = RandomVector(ctx * n_kv * hd, 21);
        const std::vector<float> v = RandomVector(ctx * n_kv * hd, 22);
        const std::vector<float> q = RandomVector(t * n_heads * hd, 23);
        KvCacheWrite(k.data(), v.data(), table.data(), n_blocks, 0, ctx, f.cache);
        const int64_t first = std::max<int64_t>(0, start + 1 - window);  // the first token's
        for (int64_t b = 0; (b + 1) * bs <= first; ++b) table[b] = static_cast<int32_t>(n_blocks);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const int64_t row = n_heads * hd;
        std::vector<float> out(t * row), ref(t * row), steps(t * row);
        PagedAttention(q.data(), t, start, table.data(), n_blocks, f.cache, n_heads, scale,
                       out.data(), &pool, window);
        reference::PagedAttention(q.data(), t, start, table.data(), f.cache, n_heads, scale,
                                  ref.data(), window);
        for (int64_t i = 0; i < t; ++i) {
          PagedAttention(&q[i * row], 1, static_cast<int32_t>(start + i), table.data(), n_blocks,
                         f.cache, n_heads, scale, &steps[i * row], nullptr, window);
        }
        const double tol = Tolerance(hd, scale, std::min(ctx, window));
        for (int64_t i = 0; i < t * row; ++i) {
          ASSERT_NEAR(out[i], ref[i], tol) << "bs=" << bs << " window=" << window
                                           << " start=" << start << " t=" << t << " i=" << i;
        }
        EXPECT_TRUE(BitEqual(out.data(), steps.data(), t * row)) << "window " << window;
        if (window >= ctx) {
          std::vector<float> whole(t * row);
          PagedAttention(q.data(), t, start, table.data(), n_blocks, f.cache, n_heads, scale,
                         whole.data(), &pool);
          EXPECT_TRUE(BitEqual(out.data(), whole.data(), t * row)) << "window " << window;
        }
      }
    }
  }
}

TEST(AttentionDeathTest, ShortBlockTableIsAProgrammerError) {
  Fixture f(4, 16, 1, 8);
  const std::vector<int32_t> table = {0};
  const std::vector<float> kv(2 * 8, 0.0f);
  EXPECT_DEATH(KvCacheWrite(kv.data(), kv.data(), table.data(), 1, 15, 2, f.cache), "too short");
}

}  // namespace
}  // namespace tpserve::kernels::cpu
