#include "server/model/plan/shard_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tpserve::model {
namespace {

// Part `i` of `n` items split into `parts` contiguous pieces whose sizes differ by at most
// one (the first `n % parts` pieces get the extra item).
Range EvenSplit(int64_t n, int64_t parts, int64_t i) {
  const int64_t base = n / parts;
  const int64_t extra = n % parts;
  const int64_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

// Whether the attention kernels can serve `plan`'s heads: they give each of its KV heads the
// same number of its query heads, in order (local query head h reads local KV head
// h / (q_heads / kv_heads)).
bool EvenGroups(const ShardPlan& plan) {
  const int64_t q = plan.q_heads_count(), kv = plan.kv_heads_count();
  if (kv <= 0 || q % kv != 0) return false;
  for (int64_t h = 0; h < q; ++h) {
    if (plan.LocalKvHead(h) != h / (q / kv)) return false;
  }
  return true;
}

// More ranks than KV heads: the query heads split evenly, each rank holding the KV heads its
// query heads read (replicated). Where that would give a rank query heads of two KV heads
// unevenly (8 query heads, 2 KV heads, 3 ranks: heads 3-5 read KV heads 0, 0, 1), each KV
// head's group is split among ranks of its own instead: the ranks are dealt to the KV heads
// as evenly as possible, and each group's query heads among its ranks.
void SplitQueryHeads(const ModelConfig& config, int rank, int world_size, ShardPlan* plan) {
  const auto assign = [&](int r, ShardPlan* p) {
    p->q_heads = EvenSplit(config.n_heads, world_size, r);
    p->kv_heads = {p->q_heads.begin / p->group_size, (p->q_heads.end - 1) / p->group_size + 1};
  };
  bool even = true;
  for (int r = 0; r < world_size && even; ++r) {
    ShardPlan other = *plan;
    assign(r, &other);
    even = EvenGroups(other);
  }
  if (even) {
    assign(rank, plan);
    return;
  }
  for (int64_t kv = 0; kv < config.n_kv_heads; ++kv) {
    const Range ranks = EvenSplit(world_size, config.n_kv_heads, kv);
    if (rank < ranks.begin || rank >= ranks.end) continue;
    const Range part = EvenSplit(plan->group_size, ranks.size(), rank - ranks.begin);
    plan->q_heads = {kv * plan->group_size + part.begin, kv * plan->group_size + part.end};
    plan->kv_heads = {kv, kv + 1};
    return;
  }
}

}  // namespace

std::string ShardPlan::DebugString() const {
  return absl::StrCat("rank ", rank, "/", world_size, ": q_heads [", q_heads.begin, ",",
                      q_heads.end, ") kv_heads [", kv_heads.begin, ",", kv_heads.end, ") ffn [",
                      ffn.begin, ",", ffn.end, ") vocab [", vocab.begin, ",", vocab.end, ")");
}

int64_t CanonicalFfnGranule(const ModelConfig& config) {
  for (int64_t g : {128, 64}) {
    if (config.ffn_dim % g == 0 && config.ffn_dim / g >= kCanonicalMaxWorld) return g;
  }
  return config.ffn_dim % 32 == 0 ? 32 : 1;
}

absl::StatusOr<ShardPlan> MakeShardPlan(const ModelConfig& config, int rank, int world_size,
                                        int64_t ffn_granule) {
  if (ffn_granule == 0) {
    // The canonical granule; a world of more ranks than it has granules (more than
    // kCanonicalMaxWorld) splits on blocks of 32 and sums in float.
    ffn_granule = CanonicalFfnGranule(config);
    if (config.ffn_dim / ffn_granule < world_size && config.ffn_dim % 32 == 0) ffn_granule = 32;
  }
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world_size must be >= 1, got ", world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside the world [0, ", world_size, ")"));
  }
  if (config.n_heads <= 0 || config.n_kv_heads <= 0 || config.n_heads % config.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_heads (", config.n_heads,
                                                   ") must be a positive multiple of n_kv_heads (",
                                                   config.n_kv_heads, ")"));
  }
  if (world_size > config.n_heads) {
    return absl::InvalidArgumentError(absl::StrCat("world_size ", world_size,
                                                   " exceeds the number of attention heads (",
                                                   config.n_heads, ")"));
  }
  ShardPlan plan;
  plan.rank = rank;
  plan.world_size = world_size;
  plan.head_dim = config.head_dim;
  plan.group_size = config.n_heads / config.n_kv_heads;
  if (world_size <= config.n_kv_heads) {
    plan.kv_heads = EvenSplit(config.n_kv_heads, world_size, rank);
    plan.q_heads = {plan.kv_heads.begin * plan.group_size, plan.kv_heads.end * plan.group_size};
  } else {
    SplitQueryHeads(config, rank, world_size, &plan);
  }

  const int64_t granule = config.ffn_dim % ffn_granule == 0 ? ffn_granule : 1;
  const int64_t granules = config.ffn_dim / granule;
  if (world_size > granules) {
    return absl::InvalidArgumentError(absl::StrCat("world_size ", world_size, " exceeds the ",
                                                   granules, " FFN granules of ", granule,
                                                   " columns"));
  }
  const Range g = EvenSplit(granules, world_size, rank);
  plan.ffn = {g.begin * granule, g.end * granule};
  plan.vocab = EvenSplit(config.vocab_size, world_size, rank);
  return plan;
}

int64_t FfnSplitGranule(const WeightSource& weights, int world_size) {
  const int64_t canonical = CanonicalFfnGranule(weights.config());
  const absl::StatusOr<GgmlTypeInfo> type = weights.StoredType("blk.0.ffn_down.weight");
  const int64_t granule = type.ok() ? std::max<int64_t>(canonical, type->block_values) : canonical;
  return granule % canonical == 0 && weights.config().ffn_dim / granule >= world_size ? granule
                                                                                      : canonical;
}

}  // namespace tpserve::model
