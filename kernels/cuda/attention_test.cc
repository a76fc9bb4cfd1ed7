// GPU tests of LaunchKvCacheWrite + LaunchPagedAttention against the CPU reference
// (kernels/cpu/reference/attention.h), on random q / k / v and random non-contiguous block
// tables: decode-only steps (split-K over long contexts), prefill chunks (start_pos > 0), mixed
// batches, odd head_dim / group / block sizes; plus bitwise batch invariance. Argument checks run
// without a GPU.
#include "kernels/cuda/attention.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/reference/attention.h"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/cuda_test_util.h"

namespace tpserve::cuda {
namespace {

using testing::DeviceArray;
using testing::RandomFloats;

// bf16 output: rounding alone is <= 2^-8 relative (8 significant bits); the kernels' f32
// arithmetic (exp2 within 2 ulp, sums of <= 9000 terms) adds far less: about 0.004 * max |ref|
// at worst. The tolerance is 1e-2 * max |ref| over the sequence's outputs: tight enough that
// attending to one key too many or too few in a short context fails.
constexpr double kRelToMaxTol = 1e-2;

struct Seq {
  int32_t num_tokens;
  int32_t start_pos;
};

struct Shape {
  int64_t n_kv_heads;
  int64_t group;  // query heads per KV head
  int64_t head_dim;
  int32_t block_size = 16;
  int32_t tile_queries = 16;
};

std::string Describe(const Shape& s) {
  return "n_kv=" + std::to_string(s.n_kv_heads) + " G=" + std::to_string(s.group) +
         " head_dim=" + std::to_string(s.head_dim) + " block=" + std::to_string(s.block_size) +
         " tile=" + std::to_string(s.tile_queries);
}

// One step of several sequences over a paged cache, built on the host: the cache holds random
// bf16 values at every position (the positions before start_pos are the sequences' history; the
// new positions are overwritten by the step's k / v), each sequence owns randomly chosen physical
// blocks, and the step's qkv rows are random f32.
class Problem {
 public:
  Problem(const Shape& shape, std::vector<Seq> seqs, uint32_t seed)
      : shape_(shape), seqs_(std::move(seqs)) {
    n_q_ = shape.n_kv_heads * shape.group;
    hd_ = shape.head_dim;
    kv_elems_ = shape.n_kv_heads * hd_;
    qkv_stride_ = (n_q_ + 2 * shape.n_kv_heads) * hd_ + 3;  // padded rows: a stride != width
    const int32_t bs = shape.block_size;
    int64_t total_blocks = 0;
    for (const Seq& s : seqs_) {
      const int32_t nb = (s.start_pos + s.num_tokens + bs - 1) / bs;
      table_stride_ = std::max<int64_t>(table_stride_, nb + 1);
      total_blocks += nb;
    }
    num_blocks_ = total_blocks + 5;  // a few blocks nobody owns
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(num_blocks_);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    // Unused table entries point far outside the cache: reading one would fault.
    tables_.assign(seqs_.size() * table_stride_, 1 << 28);
    size_t next = 0;
    for (size_t s = 0; s < seqs_.size(); ++s) {
      const int32_t nb = (seqs_[s].start_pos + seqs_[s].num_tokens + bs - 1) / bs;
      for (int32_t b = 0; b < nb; ++b) tables_[s * table_stride_ + b] = ids[next++];
    }

    const int64_t cache_elems = num_blocks_ * bs * kv_elems_;
    std::vector<float> k0 = RandomFloats(cache_elems, seed + 1);
    std::vector<float> v0 = RandomFloats(cache_elems, seed + 2);
    k_bits0_ = testing::RoundToBf16(&k0);
    v_bits0_ = testing::RoundToBf16(&v0);

    for (const Seq& s : seqs_) m_ += s.num_tokens;
    qkv_ = RandomFloats(m_ * qkv_stride_, seed + 3);
    // Larger q: peakier softmax, so a wrong key weighs in the output.
    for (int64_t r = 0; r < m_; ++r) {
      for (int64_t c = 0; c < n_q_ * hd_; ++c) qkv_[r * qkv_stride_ + c] *= 3.0f;
    }

    // Expected cache after the write: the step's k / v rounded to bf16 at their slots.
    k_bits_ = k_bits0_;
    v_bits_ = v_bits0_;
    int64_t row = 0;
    for (size_t s = 0; s < seqs_.size(); ++s) {
      for (int32_t i = 0; i < seqs_[s].num_tokens; ++i, ++row) {
        const int64_t slot = Slot(s, seqs_[s].start_pos + i);
        for (int64_t e = 0; e < kv_elems_; ++e) {
          k_bits_[slot * kv_elems_ + e] = FloatToBf16Bits(qkv_[row * qkv_stride_ + n_q_ * hd_ + e]);
          v_bits_[slot * kv_elems_ + e] =
              FloatToBf16Bits(qkv_[row * qkv_stride_ + (n_q_ + shape.n_kv_heads) * hd_ + e]);
        }
      }
    }
  }

  int64_t Slot(size_t s, int32_t pos) const {
    return static_cast<int64_t>(tables_[s * table_stride_ + pos / shape_.block_size]) *
               shape_.block_size +
           pos % shape_.block_size;
  }
  size_t num_seqs() const { return seqs_.size(); }
  int64_t row_width() const { return n_q_ * hd_; }

  // The reference output of sequence s: [num_tokens, n_q * head_dim] f32.
  std::vector<float> Reference(size_t s) const {
    const Seq& seq = seqs_[s];
    int64_t row0 = 0;
    for (size_t i = 0; i < s; ++i) row0 += seqs_[i].num_tokens;
    std::vector<float> q(seq.num_tokens * n_q_ * hd_);  // [t, n_q, head_dim]
    for (int32_t i = 0; i < seq.num_tokens; ++i) {
      std::copy_n(qkv_.begin() + (row0 + i) * qkv_stride_, n_q_ * hd_, q.begin() + i * n_q_ * hd_);
    }
    std::vector<float> k = testing::Bf16ToFloats(k_bits_);
    std::vector<float> v = testing::Bf16ToFloats(v_bits_);
    kernels::cpu::PagedKvCache cache;
    cache.k = k.data();
    cache.v = v.data();
    cache.num_blocks = num_blocks_;
    cache.block_size = shape_.block_size;
    cache.n_kv_heads = shape_.n_kv_heads;
    cache.head_dim = hd_;
    std::vector<float> out(q.size());
    kernels::cpu::reference::PagedAttention(q.data(), seq.num_tokens, seq.start_pos,
                                            tables_.data() + s * table_stride_, cache, n_q_,
                                            Scale(), out.data());
    return out;
  }

  // Runs a step made of sequences `which` (in that order) on the GPU, from the cache as it was
  // before the step; returns the output rows of each of them ([num_tokens, n_q * head_dim] bf16
  // bits) and checks the cache the write left.
  std::vector<std::vector<uint16_t>> Run(const std::vector<size_t>& which) const {
    std::vector<int32_t> num_tokens, start_pos, tables, slots;
    std::vector<float> qkv;
    for (size_t s : which) {
      num_tokens.push_back(seqs_[s].num_tokens);
      start_pos.push_back(seqs_[s].start_pos);
      tables.insert(tables.end(), tables_.begin() + s * table_stride_,
                    tables_.begin() + (s + 1) * table_stride_);
      int64_t row0 = 0;
      for (size_t i = 0; i < s; ++i) row0 += seqs_[i].num_tokens;
      qkv.insert(qkv.end(), qkv_.begin() + row0 * qkv_stride_,
                 qkv_.begin() + (row0 + seqs_[s].num_tokens) * qkv_stride_);
      for (int32_t i = 0; i < seqs_[s].num_tokens; ++i) {
        slots.push_back(static_cast<int32_t>(Slot(s, seqs_[s].start_pos + i)));
      }
    }
    const int64_t m = static_cast<int64_t>(slots.size());
    AttentionPlanOptions options;
    options.block_size = shape_.block_size;
    options.prefill_tile_queries = shape_.tile_queries;
    const AttentionPlan plan = PlanAttention(num_tokens, start_pos, options);

    DeviceArray<float> d_qkv(qkv);          // [m, qkv_stride]
    DeviceArray<uint16_t> d_k(k_bits0_);    // [num_blocks, block_size, n_kv, head_dim]
    DeviceArray<uint16_t> d_v(v_bits0_);    // same
    DeviceArray<int32_t> d_slots(slots);    // [m]
    DeviceArray<int32_t> d_tables(tables);  // [n_seqs, table_stride]
    DeviceArray<int32_t> d_q_start(plan.seq_q_start);
    DeviceArray<int32_t> d_num_tokens(plan.seq_num_tokens);
    DeviceArray<int32_t> d_start_pos(plan.seq_start_pos);
    DeviceArray<int32_t> d_decode_seqs(plan.decode_seqs);
    DeviceArray<int32_t> d_decode_splits(plan.decode_splits);
    DeviceArray<int32_t> d_decode_split_keys(plan.decode_split_keys);
    DeviceArray<int32_t> d_tile_seq(plan.prefill_tile_seq);
    DeviceArray<int32_t> d_tile_first(plan.prefill_tile_first);
    DeviceArray<float> d_partials(
        AttentionPartialsFloats(plan.num_decode(), n_q_, plan.max_splits, hd_));
    // out: [m, n_q * head_dim], NaN-filled so that an unwritten element shows.
    DeviceArray<uint16_t> d_out(std::vector<uint16_t>(m * n_q_ * hd_, 0x7fc0));

    PagedAttentionArgs args;
    args.qkv = d_qkv.data();
    args.qkv_stride = qkv_stride_;
    args.m = m;
    args.n_q_heads = n_q_;
    args.n_kv_heads = shape_.n_kv_heads;
    args.head_dim = hd_;
    args.scale = Scale();
    args.k_cache = reinterpret_cast<__nv_bfloat16*>(d_k.data());
    args.v_cache = reinterpret_cast<__nv_bfloat16*>(d_v.data());
    args.block_size = shape_.block_size;
    args.slots = d_slots.data();
    args.seq_q_start = d_q_start.data();
    args.seq_num_tokens = d_num_tokens.data();
    args.seq_start_pos = d_start_pos.data();
    args.block_tables = d_tables.data();
    args.block_table_stride = table_stride_;
    args.decode_seqs = d_decode_seqs.data();
    args.decode_splits = d_decode_splits.data();
    args.decode_split_keys = d_decode_split_keys.data();
    args.n_decode = plan.num_decode();
    args.max_splits = plan.max_splits;
    args.prefill_tile_seq = d_tile_seq.data();
    args.prefill_tile_first = d_tile_first.data();
    args.n_prefill_tiles = plan.num_prefill_tiles();
    args.prefill_tile_queries = shape_.tile_queries;
    args.partials = d_partials.data();
    args.out = reinterpret_cast<__nv_bfloat16*>(d_out.data());

    EXPECT_EQ(LaunchKvCacheWrite(args, nullptr), cudaSuccess);
    EXPECT_EQ(LaunchPagedAttention(args, nullptr), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    // The write stored exactly the bf16-rounded new rows, and nothing else changed.
    EXPECT_TRUE(d_k.Download() == ExpectedCache(k_bits0_, k_bits_, which))
        << "k cache " << Describe(shape_);
    EXPECT_TRUE(d_v.Download() == ExpectedCache(v_bits0_, v_bits_, which))
        << "v cache " << Describe(shape_);

    const std::vector<uint16_t> out = d_out.Download();
    std::vector<std::vector<uint16_t>> per_seq;
    int64_t row = 0;
    for (size_t s : which) {
      const int64_t n = seqs_[s].num_tokens * n_q_ * hd_;
      per_seq.emplace_back(out.begin() + row * n_q_ * hd_, out.begin() + row * n_q_ * hd_ + n);
      row += seqs_[s].num_tokens;
    }
    return per_seq;
  }

  // Runs all sequences in one step and compares each with the reference.
  void RunAndCompare() const {
    std::vector<size_t> all(seqs_.size());
    std::iota(all.begin(), all.end(), 0);
    const std::vector<std::vector<uint16_t>> got = Run(all);
    for (size_t s = 0; s < seqs_.size(); ++s) {
      ExpectMatchesReference(s, testing::Bf16ToFloats(got[s]));
    }
  }

  void ExpectMatchesReference(size_t s, const std::vector<float>& got) const {
    const std::vector<float> ref = Reference(s);
    ASSERT_EQ(got.size(), ref.size());
    double max_abs = 0.0;
    for (float x : ref) max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
    const double tol = kRelToMaxTol * max_abs;
    int bad = 0;
    for (size_t i = 0; i < ref.size() && bad < 5; ++i) {
      if (!(std::fabs(got[i] - ref[i]) <= tol)) {  // NaN fails too
        ++bad;
        const int64_t row = static_cast<int64_t>(i) / row_width();
        const int64_t col = static_cast<int64_t>(i) % row_width();
        ADD_FAILURE() << Describe(shape_) << ": seq " << s << " (t=" << seqs_[s].num_tokens
                      << ", start_pos=" << seqs_[s].start_pos << ") token " << row << " head "
                      << col / hd_ << " elem " << col % hd_ << ": got " << got[i] << ", want "
                      << ref[i] << " (tol " << tol << ")";
      }
    }
  }

 private:
  float Scale() const { return 1.0f / std::sqrt(static_cast<float>(hd_)); }

  // The cache a step of `which` leaves: the new rows of those sequences as in `after` (every
  // sequence's write done), the rest as in `before`.
  std::vector<uint16_t> ExpectedCache(const std::vector<uint16_t>& before,
                                      const std::vector<uint16_t>& after,
                                      const std::vector<size_t>& which) const {
    std::vector<uint16_t> expected = before;
    for (size_t s : which) {
      for (int32_t i = 0; i < seqs_[s].num_tokens; ++i) {
        const int64_t slot = Slot(s, seqs_[s].start_pos + i);
        std::copy_n(after.begin() + slot * kv_elems_, kv_elems_,
                    expected.begin() + slot * kv_elems_);
      }
    }
    return expected;
  }

  Shape shape_;
  std::vector<Seq> seqs_;
  int64_t n_q_ = 0, hd_ = 0, kv_elems_ = 0, qkv_stride_ = 0, m_ = 0;
  int64_t table_stride_ = 1, num_blocks_ = 0;
  std::vector<int32_t> tables_;              // [n_seqs, table_stride]
  std::vector<uint16_t> k_bits0_, v_bits0_;  // cache before the step
  std::vector<uint16_t> k_bits_, v_bits_;    // cache after the step's write
  std::vector<float> qkv_;                   // [m, qkv_stride]
};

// Decode steps: one new token per sequence, contexts 1 .. 9000 (9000: 16 splits).
std::vector<Seq> DecodeSeqs() {
  std::vector<Seq> seqs;
  for (int32_t context : {1, 15, 16, 17, 300, 3000, 9000}) seqs.push_back({1, context - 1});
  return seqs;
}

TEST(PagedAttentionTest, DecodeMatchesReference) {
  TPSERVE_SKIP_WITHOUT_GPU();
  for (const Shape& shape : {Shape{2, 1, 64}, Shape{2, 3, 64}, Shape{1, 3, 128}, Shape{2, 4, 128},
                             Shape{2, 8, 64}, Shape{1, 8, 128}}) {
    SCOPED_TRACE(Describe(shape));
    Problem(shape, DecodeSeqs(), 11).RunAndCompare();
  }
}

TEST(PagedAttentionTest, PrefillChunksMatchReference) {
  TPSERVE_SKIP_WITHOUT_GPU();
  // Whole prompts and later chunks (start_pos > 0), tile-aligned or not.
  const std::vector<Seq> seqs = {{2, 0}, {16, 0}, {37, 100}, {5, 17}, {33, 3000}, {17, 16}};
  for (const Shape& shape : {Shape{2, 1, 64}, Shape{2, 3, 64}, Shape{1, 3, 128}, Shape{2, 4, 128},
                             Shape{1, 8, 128}, Shape{2, 8, 64}}) {
    SCOPED_TRACE(Describe(shape));
    Problem(shape, seqs, 12).RunAndCompare();
  }
}

TEST(PagedAttentionTest, MixedBatchMatchesReference) {
  TPSERVE_SKIP_WITHOUT_GPU();
  const std::vector<Seq> seqs = {{1, 299}, {40, 0}, {1, 0}, {24, 513}, {1, 8999}, {3, 7}, {1, 16}};
  for (const Shape& shape : {Shape{2, 3, 64}, Shape{2, 4, 128}, Shape{1, 8, 128}}) {
    SCOPED_TRACE(Describe(shape));
    Problem(shape, seqs, 13).RunAndCompare();
  }
}

// head_dim off the fast paths (scalar loads, padded lanes), head_dim 256 (large shared memory),
// groups of more than 8 heads (chunked decode, several prefill passes), other block and tile
// sizes.
TEST(PagedAttentionTest, UnusualShapesMatchReference) {
  TPSERVE_SKIP_WITHOUT_GPU();
  const std::vector<Seq> seqs = {{1, 0}, {1, 40}, {1, 700}, {19, 0}, {9, 33}, {50, 260}};
  for (const Shape& shape :
       {Shape{2, 2, 80}, Shape{1, 3, 96}, Shape{2, 1, 34}, Shape{1, 4, 66}, Shape{2, 8, 256},
        Shape{1, 9, 64}, Shape{1, 12, 128}, Shape{2, 3, 64, 32}, Shape{1, 4, 128, 5},
        Shape{2, 3, 64, 16, 8}, Shape{1, 8, 64, 16, 64}, Shape{2, 2, 128, 16, 1}}) {
    SCOPED_TRACE(Describe(shape));
    Problem(shape, seqs, 14).RunAndCompare();
  }
}

// A sequence's output bits do not depend on what else is in the step, nor on its place in it.
TEST(PagedAttentionTest, BatchInvariant) {
  TPSERVE_SKIP_WITHOUT_GPU();
  const std::vector<Seq> seqs = {{1, 3000}, {20, 40}, {1, 17}, {1, 8999}, {33, 600}, {1, 0}};
  for (const Shape& shape : {Shape{2, 3, 64}, Shape{2, 4, 128}}) {
    SCOPED_TRACE(Describe(shape));
    const Problem problem(shape, seqs, 15);
    const std::vector<size_t> all = {0, 1, 2, 3, 4, 5};
    const std::vector<std::vector<uint16_t>> batch = problem.Run(all);
    const std::vector<std::vector<uint16_t>> reversed = problem.Run({5, 4, 3, 2, 1, 0});
    for (size_t s = 0; s < seqs.size(); ++s) {
      const std::vector<std::vector<uint16_t>> alone = problem.Run({s});
      EXPECT_TRUE(alone[0] == batch[s]) << "seq " << s << " alone vs in the batch";
      EXPECT_TRUE(reversed[seqs.size() - 1 - s] == batch[s]) << "seq " << s << " reordered";
      problem.ExpectMatchesReference(s, testing::Bf16ToFloats(batch[s]));
    }
  }
}

// No GPU needed: bad shapes are refused before any launch, an empty step launches nothing.
TEST(PagedAttentionTest, RejectsBadArgumentsWithoutLaunching) {
  PagedAttentionArgs args;
  args.n_q_heads = 6;
  args.n_kv_heads = 4;  // does not divide n_q_heads
  args.head_dim = 64;
  args.qkv_stride = (6 + 8) * 64;
  args.n_decode = 1;
  EXPECT_EQ(LaunchPagedAttention(args, nullptr), cudaErrorInvalidValue);
  args.n_kv_heads = 2;
  args.head_dim = 512;  // > 256
  args.qkv_stride = (6 + 4) * 512;
  EXPECT_EQ(LaunchPagedAttention(args, nullptr), cudaErrorInvalidValue);
  args.head_dim = 64;
  args.qkv_stride = 64;  // narrower than the q, k and v heads
  EXPECT_EQ(LaunchPagedAttention(args, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchKvCacheWrite(args, nullptr), cudaErrorInvalidValue);
  args.qkv_stride = (6 + 4) * 64;
  EXPECT_EQ(LaunchPagedAttention(args, nullptr), cudaErrorInvalidValue);  // null buffers
  args.n_decode = 0;
  EXPECT_EQ(LaunchPagedAttention(args, nullptr), cudaSuccess);  // nothing to do
  args.m = 0;
  EXPECT_EQ(LaunchKvCacheWrite(args, nullptr), cudaSuccess);
}

TEST(PagedAttentionTest, PartialsSize) {
  EXPECT_EQ(AttentionPartialsFloats(3, 8, 16, 128), 3 * 8 * 16 * 130);
  EXPECT_EQ(AttentionPartialsFloats(0, 8, 16, 128), 0);
}

}  // namespace
}  // namespace tpserve::cuda
