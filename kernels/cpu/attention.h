// File: kernels/cpu/attention.h
//
// Paged KV cache attention for one layer: writing new keys/values into cache blocks, and causal
// GQA attention of new query tokens over their sequence's cached positions. AVX2/FMA;
// stateless, thread-safe given one ThreadPool caller at a time.
//
// KV cache layout (one layer, one rank): K and V each [num_blocks, block_size, n_kv_heads,
// head_dim] f32, n_kv_heads being the rank's KV heads. Position p of a sequence lives in block
// block_table[p / block_size], slot p % block_size:
//   k + ((block_table[p / block_size] * block_size + p % block_size) * n_kv_heads + kvh) * head_dim
//
// Batch invariance: a query token's output depends only on its q, its context length and the
// cached values, never on which physical blocks hold them, on the other tokens or sequences of
// the step, or on the thread count. Scores are dot products in a fixed order; the online softmax
// walks positions in increasing order in chunks aligned to absolute multiples of block_size.
// Threads split (token, KV heads) units; one query head of one token is never split.
#ifndef TPSERVE_KERNELS_CPU_ATTENTION_H_
#define TPSERVE_KERNELS_CPU_ATTENTION_H_

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/kv_block.h"

namespace tpserve::kernels::cpu {

// One layer's paged KV cache (memory owned by the caller).
struct PagedKvCache {
  float* k = nullptr;  // [num_blocks, block_size, n_kv_heads, head_dim]
  float* v = nullptr;  // [num_blocks, block_size, n_kv_heads, head_dim]
  int64_t num_blocks = 0;
  int64_t block_size = kKvBlockSize;
  int64_t n_kv_heads = 0;  // KV heads held by this rank
  int64_t head_dim = 0;
};

// Writes t new tokens at positions start_pos .. start_pos + t - 1.
//   k, v: [t, n_kv_heads, head_dim]; block_table: [n_blocks_in_table] physical block ids, which
//   must cover position start_pos + t - 1 (CHECKed).
void KvCacheWrite(const float* k, const float* v, const int32_t* block_table,
                  int64_t n_blocks_in_table, int32_t start_pos, int64_t t,
                  const PagedKvCache& cache);

// Causal attention for t new tokens of ONE sequence whose K/V (including these tokens) are in
// the cache. Token i (position start_pos + i) attends to positions 0 .. start_pos + i. Query
// head h uses KV head h / (n_heads / n_kv_heads).
//   q: [t, n_heads, head_dim] (n_heads: the rank's query heads, a multiple of n_kv_heads),
//   block_table: [n_blocks_in_table], out: [t, n_heads, head_dim] (must not alias q).
//   scale: usually 1 / sqrt(head_dim). pool may be null.
//   window: a sliding window (Gemma 3's local layers, Mistral): when > 0, position p attends
//   to its last `window` positions, max(0, p - window + 1) .. p, only; 0: to all. The blocks
//   wholly before the window are not read (their table entries may be anything).
void PagedAttention(const float* q, int64_t t, int32_t start_pos, const int32_t* block_table,
                    int64_t n_blocks_in_table, const PagedKvCache& cache, int64_t n_heads,
                    float scale, float* out, ThreadPool* pool, int64_t window = 0);

// One sequence's part of a batched step.
struct AttentionSequence {
  int64_t num_tokens = 0;                // t_s: its new tokens (rows of q)
  int32_t start_pos = 0;                 // position of its first new token
  const int32_t* block_table = nullptr;  // [num_blocks]
  int64_t num_blocks = 0;
};

// PagedAttention over several sequences in one ParallelFor (balanced by context length):
//   q: [sum_s t_s, n_heads, head_dim], the sequences' tokens in order; out: same shape;
//   seqs: [n_seqs]. Each token's result is bit-identical to a PagedAttention call on its
//   sequence alone.
void PagedAttentionBatch(const float* q, const AttentionSequence* seqs, int64_t n_seqs,
                         const PagedKvCache& cache, int64_t n_heads, float scale, float* out,
                         ThreadPool* pool, int64_t window = 0);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_ATTENTION_H_
