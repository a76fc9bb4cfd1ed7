// AttentionPlan: how one step's attention is cut into GPU work, computed on the host from the
// sequences' shapes alone (plain C++, no CUDA). Sequences with one new token (decode) are
// split along their context into key ranges (flash-decoding); the split count depends only on
// the sequence's own context length, never on the rest of the batch. Sequences with several
// new tokens (prefill chunks) are cut into tiles of consecutive query tokens. Plain data.
#ifndef TPSERVE_KERNELS_CUDA_ATTENTION_PLAN_H_
#define TPSERVE_KERNELS_CUDA_ATTENTION_PLAN_H_

#include <cstdint>
#include <vector>

#include "kernels/kv_block.h"

namespace tpserve::cuda {

struct AttentionPlanOptions {
  int32_t prefill_tile_queries = 16;  // query tokens per prefill tile
  int32_t min_split_keys = 256;       // a decode split covers at least this many keys ...
  int32_t max_splits = 16;            // ... and a sequence has at most this many splits
  int32_t block_size = kKvBlockSize;  // split boundaries are multiples of the KV block size
};

struct AttentionPlan {
  // Per sequence, in step order: [n_seqs].
  std::vector<int32_t> seq_q_start;     // first row of the sequence in the step's q / out
  std::vector<int32_t> seq_num_tokens;  // its new tokens
  std::vector<int32_t> seq_start_pos;   // position of its first new token

  // Decode work: [n_decode] sequences with exactly one new token.
  std::vector<int32_t> decode_seqs;        // sequence index
  std::vector<int32_t> decode_splits;      // key splits, in [1, max_splits]
  std::vector<int32_t> decode_split_keys;  // keys per split (the last split may hold fewer)
  int32_t max_splits = 0;                  // max of decode_splits (0 when no decode)

  // Prefill work: [n_tiles] tiles of up to prefill_tile_queries query tokens of one sequence.
  std::vector<int32_t> prefill_tile_seq;    // sequence index
  std::vector<int32_t> prefill_tile_first;  // first new token (index within the sequence's chunk)

  int32_t num_decode() const { return static_cast<int32_t>(decode_seqs.size()); }
  int32_t num_prefill_tiles() const { return static_cast<int32_t>(prefill_tile_seq.size()); }
};

// num_tokens[s] >= 1 and start_pos[s] >= 0 for every sequence s (the caller checks).
AttentionPlan PlanAttention(const std::vector<int32_t>& num_tokens,
                            const std::vector<int32_t>& start_pos,
                            const AttentionPlanOptions& options);

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_ATTENTION_PLAN_H_
