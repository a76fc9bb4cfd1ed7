// ShardPlan: which slice of every weight one tensor-parallel rank owns (Megatron-style), for
// a model of ModelConfig shape and a world of P ranks. Plain data; thread-compatible.
//
//   weight            split                               this rank's part
//   wq                output rows, by query head          [q_heads() * head_dim, d_model]
//   wk, wv            output rows, by KV head             [kv_heads() * head_dim, d_model]
//   wo                input columns, by query head        [d_model, q_heads() * head_dim]
//   w_gate, w_up      output rows                         [ffn_cols(), d_model]
//   w_down            input columns                       [d_model, ffn_cols()]
//   LM head           vocab rows                          [vocab_rows(), d_model]
//   embedding, norms  replicated
//
// Heads need not divide evenly: when P <= n_kv_heads, each rank owns a contiguous range of
// whole KV heads (sizes differ by at most one) with their query heads. When P > n_kv_heads,
// the query heads are split evenly (sizes differ by at most one) and each rank holds the KV
// heads its query heads read (KV heads replicated), unless that would give a rank the query
// heads of two KV heads in unequal numbers, which the attention kernels cannot serve: then
// each rank takes part of one KV head's query heads, the ranks dealt evenly to the KV heads. FFN
// columns are split on multiples of `ffn_granule` so that row-parallel slices of quantised w_down
// land on block boundaries, and on the canonical path's granules (CanonicalFfnGranule) whatever
// the world.
#ifndef TPSERVE_SERVER_MODEL_PLAN_SHARD_PLAN_H_
#define TPSERVE_SERVER_MODEL_PLAN_SHARD_PLAN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "server/model/weights/model_config.h"
#include "server/model/weights/weight_source.h"

namespace tpserve::model {

// A half-open range [begin, end).
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

struct ShardPlan {
  int rank = 0;
  int world_size = 1;
  int64_t head_dim = 0;
  int64_t group_size = 1;  // query heads per KV head
  Range q_heads;           // global query head ids owned
  Range kv_heads;          // global KV head ids held (may overlap other ranks when replicated)
  Range ffn;               // FFN hidden columns owned
  Range vocab;             // LM head rows owned

  int64_t q_heads_count() const { return q_heads.size(); }
  int64_t kv_heads_count() const { return kv_heads.size(); }
  // Rows of wq / wk / wv and columns of wo owned, in units of single values.
  Range q_rows() const { return {q_heads.begin * head_dim, q_heads.end * head_dim}; }
  Range kv_rows() const { return {kv_heads.begin * head_dim, kv_heads.end * head_dim}; }
  // The local KV head that local query head `local_q` reads.
  int64_t LocalKvHead(int64_t local_q) const {
    return (q_heads.begin + local_q) / group_size - kv_heads.begin;
  }
  std::string DebugString() const;
};

// The largest world the canonical path's FFN granule is chosen to split for.
inline constexpr int64_t kCanonicalMaxWorld = 8;

// The FFN columns the canonical path sums as one granule (a float chain, then one fixed-point
// value: kernels/cpu/quant/fixed_sum.h), and so the columns every world's split falls on:
// the largest of 128, 64 and 32 that divides ffn_dim into at least kCanonicalMaxWorld
// granules; 32 when none does (1 when ffn_dim is not a multiple of 32: no canonical path).
// A property of the model alone, never of the world, so every world adds the same granules.
int64_t CanonicalFfnGranule(const ModelConfig& config);

// The plan of `rank` in a world of `world_size`, or InvalidArgument when the world is empty,
// the rank is out of range, or there are more ranks than query heads or FFN granules.
// ffn_granule 0: CanonicalFfnGranule(config), or 32 for a world of more ranks than that has
// granules (the model then sums in float: LlamaModel::exact_sums).
absl::StatusOr<ShardPlan> MakeShardPlan(const ModelConfig& config, int rank, int world_size,
                                        int64_t ffn_granule = 0);

// The FFN split granule for a world of `world_size` (MakeShardPlan's ffn_granule): the block
// size of the stored ffn_down (256 for K-quants), so that its row-parallel slices keep their
// blocks, when that is a multiple of the canonical granule (CanonicalFfnGranule) and the FFN
// has as many such blocks as ranks; else the canonical granule.
int64_t FfnSplitGranule(const WeightSource& weights, int world_size);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_PLAN_SHARD_PLAN_H_
