#include "kernels/cuda/attention_plan.h"

#include <algorithm>
#include <cstddef>

namespace tpserve::cuda {
namespace {

int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

}  // namespace

AttentionPlan PlanAttention(const std::vector<int32_t>& num_tokens,
                            const std::vector<int32_t>& start_pos,
                            const AttentionPlanOptions& options) {
  const int32_t tile_queries = std::max(1, options.prefill_tile_queries);
  const int32_t min_split_keys = std::max(1, options.min_split_keys);
  const int32_t max_splits = std::max(1, options.max_splits);
  const int32_t block_size = std::max(1, options.block_size);

  AttentionPlan plan;
  const size_t n_seqs = num_tokens.size();
  plan.seq_q_start.reserve(n_seqs);
  plan.seq_num_tokens.reserve(n_seqs);
  plan.seq_start_pos.reserve(n_seqs);
  int32_t q_start = 0;
  for (size_t s = 0; s < n_seqs; ++s) {
    const int32_t t = num_tokens[s];
    const int32_t pos = start_pos[s];
    const auto seq = static_cast<int32_t>(s);
    plan.seq_q_start.push_back(q_start);
    plan.seq_num_tokens.push_back(t);
    plan.seq_start_pos.push_back(pos);
    q_start += t;
    if (t == 1) {
      // Decode: one query over keys [0, context). Split count from the context alone; each
      // split's key range starts at a multiple of block_size. After rounding split_keys up, the
      // count is recomputed so that no split is empty (it can only shrink).
      const int32_t context = pos + 1;
      int32_t splits = std::clamp(CeilDiv(context, min_split_keys), 1, max_splits);
      const int32_t split_keys = CeilDiv(CeilDiv(context, splits), block_size) * block_size;
      splits = CeilDiv(context, split_keys);
      plan.decode_seqs.push_back(seq);
      plan.decode_splits.push_back(splits);
      plan.decode_split_keys.push_back(split_keys);
      plan.max_splits = std::max(plan.max_splits, splits);
    } else {
      for (int32_t first = 0; first < t; first += tile_queries) {
        plan.prefill_tile_seq.push_back(seq);
        plan.prefill_tile_first.push_back(first);
      }
    }
  }
  return plan;
}

}  // namespace tpserve::cuda
