#include "kernels/cpu/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "glog/logging.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {
namespace {

// Fixed cost added to each (token, kv head) unit when balancing threads by context length.
constexpr int64_t kUnitBaseCost = 32;

// dot(a, b) over d: one 8-lane FMA chain, masked tail, HorizontalSum. Dot4 below computes four
// of these with exactly the same per-dot sequence (only interleaved for latency).
inline float Dot(const float* a, const float* b, int64_t d) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  }
  if (i < d) {
    const __m256i mask = TailMask(d - i);
    acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, mask), _mm256_maskload_ps(b + i, mask), acc);
  }
  return HorizontalSum(acc);
}

// out[j] = dot(q, k + j * stride) for j < 4.
inline void Dot4(const float* q, const float* k, int64_t stride, int64_t d, float* out) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
    acc0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + i), acc0);
    acc1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + stride + i), acc1);
    acc2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 2 * stride + i), acc2);
    acc3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 3 * stride + i), acc3);
  }
  if (i < d) {
    const __m256i mask = TailMask(d - i);
    const __m256 qv = _mm256_maskload_ps(q + i, mask);
    acc0 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + i, mask), acc0);
    acc1 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + stride + i, mask), acc1);
    acc2 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + 2 * stride + i, mask), acc2);
    acc3 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + 3 * stride + i, mask), acc3);
  }
  out[0] = HorizontalSum(acc0);
  out[1] = HorizontalSum(acc1);
  out[2] = HorizontalSum(acc2);
  out[3] = HorizontalSum(acc3);
}

// acc[0..d) = acc * corr + sum_j p[j] * v_j (j = 0..n-1 in order), v_j = v + j * stride.
// Eight 8-lane columns at a time, each its own FMA chain (one chain alone would wait on the
// FMA latency at every j); every element's sequence of operations is the same either way.
void AccumulateValues(float* acc, float corr, const float* p, const float* v, int64_t stride,
                      int64_t n, int64_t d) {
  const __m256 c = _mm256_set1_ps(corr);
  int64_t i = 0;
  for (; i + 64 <= d; i += 64) {
    __m256 a[8];
    for (int k = 0; k < 8; ++k) a[k] = _mm256_mul_ps(_mm256_loadu_ps(acc + i + 8 * k), c);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const float* vj = v + j * stride + i;
      for (int k = 0; k < 8; ++k) a[k] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * k), a[k]);
    }
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(acc + i + 8 * k, a[k]);
  }
  for (; i + 8 <= d; i += 8) {
    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + i), c);
    for (int64_t j = 0; j < n; ++j) {
      a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v + j * stride + i), a);
    }
    _mm256_storeu_ps(acc + i, a);
  }
  if (i < d) {
    const __m256i mask = TailMask(d - i);
    __m256 a = _mm256_mul_ps(_mm256_maskload_ps(acc + i, mask), c);
    for (int64_t j = 0; j < n; ++j) {
      a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_maskload_ps(v + j * stride + i, mask), a);
    }
    _mm256_maskstore_ps(acc + i, mask, a);
  }
}

// One unit: the query heads of KV heads [kv0, kv1) of one token attend to positions
// [first, ctx_len) of its sequence (first > 0 under a sliding window). Chunks stay aligned to
// absolute multiples of block_size, the first one starting at `first`. Blocks are walked once, all
// the unit's KV heads of a block together (they share cache lines); each query head's arithmetic is
// the same whatever the unit.
//   q_tok, out_tok: [n_heads, head_dim] (this token); scores: [block_size] scratch;
//   running_max, running_sum: [(kv1 - kv0) * group] scratch.
void AttendUnit(const float* q_tok, int64_t first, int64_t ctx_len, const int32_t* block_table,
                const PagedKvCache& cache, int64_t kv0, int64_t kv1, int64_t group, float scale,
                float* out_tok, float* scores, float* running_max, float* running_sum) {
  const int64_t hd = cache.head_dim;
  const int64_t bs = cache.block_size;
  const int64_t slot_stride = cache.n_kv_heads * hd;  // elements between consecutive slots
  const int64_t h0 = kv0 * group;
  const int64_t heads = (kv1 - kv0) * group;
  std::fill(out_tok + h0 * hd, out_tok + (h0 + heads) * hd, 0.0f);
  std::fill(running_max, running_max + heads, -std::numeric_limits<float>::infinity());
  std::fill(running_sum, running_sum + heads, 0.0f);
  for (int64_t b = first / bs; b * bs < ctx_len; ++b) {
    const int64_t s0 = std::max(b * bs, first);              // the chunk's first position
    const int64_t n = std::min((b + 1) * bs, ctx_len) - s0;  // positions in this chunk
    if ((b + 1) * bs < ctx_len) {
      // Blocks sit anywhere in the cache, so the hardware cannot guess the next one: pull this
      // unit's slice of it ([block_size, kv1 - kv0, head_dim] of K and V) into L2 while this
      // one runs (into L2 rather than L1: more misses in flight, measured ~25% faster).
      const int64_t next =
          (static_cast<int64_t>(block_table[b + 1]) * bs * cache.n_kv_heads + kv0) * hd;
      const int64_t slice_bytes = (kv1 - kv0) * hd * static_cast<int64_t>(sizeof(float));
      for (int64_t j = 0; j < std::min(bs, ctx_len - (b + 1) * bs); ++j) {
        const char* kp = reinterpret_cast<const char*>(cache.k + next + j * slot_stride);
        const char* vp = reinterpret_cast<const char*>(cache.v + next + j * slot_stride);
        for (int64_t off = 0; off < slice_bytes; off += 64) {
          _mm_prefetch(kp + off, _MM_HINT_T1);
          _mm_prefetch(vp + off, _MM_HINT_T1);
        }
      }
    }
    for (int64_t kvh = kv0; kvh < kv1; ++kvh) {
      const int64_t base =
          ((static_cast<int64_t>(block_table[b]) * bs + s0 - b * bs) * cache.n_kv_heads + kvh) * hd;
      const float* kb = cache.k + base;  // slot j at kb + j * slot_stride: [head_dim]
      const float* vb = cache.v + base;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* qh = q_tok + h * hd;  // [head_dim]
        float* state_max = running_max + (h - h0);
        float* state_sum = running_sum + (h - h0);
        int64_t j = 0;
        for (; j + 4 <= n; j += 4) Dot4(qh, kb + j * slot_stride, slot_stride, hd, scores + j);
        for (; j < n; ++j) scores[j] = Dot(qh, kb + j * slot_stride, hd);
        float chunk_max = -std::numeric_limits<float>::infinity();
        for (j = 0; j < n; ++j) {
          scores[j] *= scale;
          chunk_max = std::max(chunk_max, scores[j]);
        }
        const float new_max = std::max(*state_max, chunk_max);
        const float corr = ExpScalar(*state_max - new_max);  // 0 on the first chunk
        *state_max = new_max;
        const __m256 mv = _mm256_set1_ps(new_max);
        for (j = 0; j < n; j += 8) {
          const __m256i mask = TailMask(std::min<int64_t>(8, n - j));
          _mm256_maskstore_ps(scores + j, mask,
                              Exp(_mm256_sub_ps(_mm256_maskload_ps(scores + j, mask), mv)));
        }
        float sum = 0.0f;
        for (j = 0; j < n; ++j) sum += scores[j];
        *state_sum = *state_sum * corr + sum;
        AccumulateValues(out_tok + h * hd, corr, scores, vb, slot_stride, n, hd);
      }
    }
  }
  for (int64_t g = 0; g < heads; ++g) {
    const __m256 inv = _mm256_set1_ps(1.0f / running_sum[g]);
    float* o = out_tok + (h0 + g) * hd;
    int64_t i = 0;
    for (; i + 8 <= hd; i += 8) _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(o + i), inv));
    if (i < hd) {
      const __m256i mask = TailMask(hd - i);
      _mm256_maskstore_ps(o + i, mask, _mm256_mul_ps(_mm256_maskload_ps(o + i, mask), inv));
    }
  }
}

}  // namespace

void KvCacheWrite(const float* k, const float* v, const int32_t* block_table,
                  int64_t n_blocks_in_table, int32_t start_pos, int64_t t,
                  const PagedKvCache& cache) {
  CHECK_GE(start_pos, 0);
  if (t <= 0) return;
  const int64_t bs = cache.block_size;
  CHECK_LT((start_pos + t - 1) / bs, n_blocks_in_table) << "block table too short";
  const int64_t token_elems = cache.n_kv_heads * cache.head_dim;
  for (int64_t i = 0; i < t; ++i) {
    const int64_t p = start_pos + i;
    const int64_t block = block_table[p / bs];
    CHECK(block >= 0 && block < cache.num_blocks) << "block id " << block;
    const int64_t dst = (block * bs + p % bs) * token_elems;
    std::memcpy(cache.k + dst, k + i * token_elems, token_elems * sizeof(float));
    std::memcpy(cache.v + dst, v + i * token_elems, token_elems * sizeof(float));
  }
}

void PagedAttention(const float* q, int64_t t, int32_t start_pos, const int32_t* block_table,
                    int64_t n_blocks_in_table, const PagedKvCache& cache, int64_t n_heads,
                    float scale, float* out, ThreadPool* pool, int64_t window) {
  const AttentionSequence seq{t, start_pos, block_table, n_blocks_in_table};
  PagedAttentionBatch(q, &seq, 1, cache, n_heads, scale, out, pool, window);
}

void PagedAttentionBatch(const float* q, const AttentionSequence* seqs, int64_t n_seqs,
                         const PagedKvCache& cache, int64_t n_heads, float scale, float* out,
                         ThreadPool* pool, int64_t window) {
  CHECK_GE(window, 0);
  const int64_t n_kv = cache.n_kv_heads;
  CHECK(n_kv > 0 && n_heads % n_kv == 0) << n_heads << " query heads, " << n_kv << " KV heads";
  const int64_t group = n_heads / n_kv;
  const int64_t hd = cache.head_dim;

  // Per token row: its sequence, context length and first attended position.
  std::vector<int32_t> row_seq;    // [rows]
  std::vector<int64_t> row_ctx;    // [rows]
  std::vector<int64_t> row_first;  // [rows]
  for (int64_t s = 0; s < n_seqs; ++s) {
    const AttentionSequence& seq = seqs[s];
    CHECK_GE(seq.start_pos, 0);
    if (seq.num_tokens <= 0) continue;
    CHECK_LT((seq.start_pos + seq.num_tokens - 1) / cache.block_size, seq.num_blocks)
        << "block table of sequence " << s << " too short";
    for (int64_t i = 0; i < seq.num_tokens; ++i) {
      row_seq.push_back(static_cast<int32_t>(s));
      row_ctx.push_back(seq.start_pos + i + 1);
      row_first.push_back(window > 0 ? std::max<int64_t>(0, row_ctx.back() - window) : 0);
    }
  }
  const int64_t rows = static_cast<int64_t>(row_ctx.size());
  if (rows == 0) return;
  const int parts = pool == nullptr ? 1 : pool->num_threads();
  // Units are (row, KV-head slice), row-major. With enough rows to keep every thread busy a
  // unit takes all KV heads of its row (each cache block is then read once, contiguously);
  // otherwise one KV head each, so a single decode token still spreads over the threads.
  const int64_t kv_per_unit = rows >= 4 * parts ? n_kv : 1;
  const int64_t slices = n_kv / kv_per_unit;
  const int64_t units = rows * slices;
  std::vector<int64_t> cost(units + 1, 0);  // cost[u]: summed cost of units before u
  for (int64_t u = 0; u < units; ++u) {
    const int64_t row = u / slices;
    cost[u + 1] = cost[u] + (row_ctx[row] - row_first[row] + kUnitBaseCost) * kv_per_unit;
  }

  auto run = [&](int64_t part_begin, int64_t part_end) {
    // [block_size] scores, then running max and sum: [kv_per_unit * group] each.
    std::vector<float> scratch(cache.block_size + 2 * kv_per_unit * group);
    float* scores = scratch.data();
    float* running_max = scores + cache.block_size;
    float* running_sum = running_max + kv_per_unit * group;
    for (int64_t part = part_begin; part < part_end; ++part) {
      const int64_t lo = cost[units] * part / parts;
      const int64_t hi = cost[units] * (part + 1) / parts;
      const int64_t u0 = std::lower_bound(cost.begin(), cost.end(), lo) - cost.begin();
      const int64_t u1 = std::lower_bound(cost.begin(), cost.end(), hi) - cost.begin();
      for (int64_t u = u0; u < std::min(u1, units); ++u) {
        const int64_t row = u / slices;
        const int64_t kv0 = (u % slices) * kv_per_unit;
        const AttentionSequence& seq = seqs[row_seq[row]];
        AttendUnit(q + row * n_heads * hd, row_first[row], row_ctx[row], seq.block_table, cache,
                   kv0, kv0 + kv_per_unit, group, scale, out + row * n_heads * hd, scores,
                   running_max, running_sum);
      }
    }
  };
  if (pool == nullptr) {
    run(0, parts);
  } else {
    pool->ParallelFor(parts, run);
  }
}

}  // namespace tpserve::kernels::cpu
