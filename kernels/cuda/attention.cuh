// Paged attention on the GPU for one layer: the KV-cache write of the step's new keys and
// values, and causal GQA attention of the step's queries over their sequence's cached
// positions: a split-K flash-decoding kernel for decode tokens (plus the combine of the
// splits) and a tiled kernel for prefill chunks, both reading the paged bf16 cache with f32
// accumulation and an online softmax. Work is cut by an AttentionPlan (attention_plan.h).
// Stateless launchers.
//
// Cache layout (one layer, one rank), as on the CPU: K and V each
// [num_blocks, block_size, n_kv_heads, head_dim] bf16. Position p of sequence s lives at slot
// block_tables[s * block_table_stride + p / block_size] * block_size + p % block_size.
// Query head h reads KV head h / (n_q_heads / n_kv_heads).
#ifndef TPSERVE_KERNELS_CUDA_ATTENTION_CUH_
#define TPSERVE_KERNELS_CUDA_ATTENTION_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kv_block.h"

namespace tpserve::cuda {

struct PagedAttentionArgs {
  // The step's fused projections, after RoPE: [m, qkv_stride] f32; row r holds q heads at
  // column 0, k heads at n_q_heads * head_dim, v heads at (n_q_heads + n_kv_heads) * head_dim.
  const float* qkv = nullptr;
  int64_t qkv_stride = 0;
  int64_t m = 0;  // rows of the step
  int64_t n_q_heads = 0;
  int64_t n_kv_heads = 0;  // divides n_q_heads
  // Any value in [1, 256]. 64, 128 and 256 are the fast paths; others run padded to the next of
  // them (multiples of 8 keep vector loads, other values use scalar loads).
  int64_t head_dim = 0;
  float scale = 1.0f;  // usually 1 / sqrt(head_dim)

  // This layer: [num_blocks, block_size, n_kv_heads, head_dim], 16-byte aligned.
  __nv_bfloat16* k_cache = nullptr;
  __nv_bfloat16* v_cache = nullptr;
  int64_t block_size = kKvBlockSize;

  // Step metadata (device copies of an AttentionPlan and the block tables).
  // [m] cache slot of each new token (block * block_size + off); rows with a negative slot are
  // not written.
  const int32_t* slots = nullptr;
  const int32_t* seq_q_start = nullptr;     // [n_seqs]
  const int32_t* seq_num_tokens = nullptr;  // [n_seqs]
  const int32_t* seq_start_pos = nullptr;   // [n_seqs]
  const int32_t* block_tables = nullptr;    // [n_seqs, block_table_stride]
  int64_t block_table_stride = 0;
  const int32_t* decode_seqs = nullptr;        // [n_decode]
  const int32_t* decode_splits = nullptr;      // [n_decode]
  const int32_t* decode_split_keys = nullptr;  // [n_decode]
  int32_t n_decode = 0;
  int32_t max_splits = 0;  // the plan's max_splits (or more): the partials' split stride
  const int32_t* prefill_tile_seq = nullptr;    // [n_prefill_tiles]
  const int32_t* prefill_tile_first = nullptr;  // [n_prefill_tiles]
  int32_t n_prefill_tiles = 0;
  int32_t prefill_tile_queries = 16;  // the plan's AttentionPlanOptions::prefill_tile_queries

  // Split-K partials: [AttentionPartialsFloats(n_decode, n_q_heads, max_splits, head_dim)] f32
  // device scratch.
  float* partials = nullptr;

  __nv_bfloat16* out = nullptr;  // [m, n_q_heads * head_dim]
};

// Floats of scratch LaunchPagedAttention needs for `n_decode` decode sequences.
int64_t AttentionPartialsFloats(int64_t n_decode, int64_t n_q_heads, int64_t max_splits,
                                int64_t head_dim);

// Writes the k and v heads of every step row into the cache at slots[row] (bf16).
cudaError_t LaunchKvCacheWrite(const PagedAttentionArgs& args, cudaStream_t stream);

// Attention of every step row (after LaunchKvCacheWrite on the same stream): decode, combine
// and prefill kernels. Rows not covered by the plan are left untouched.
cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_ATTENTION_CUH_
