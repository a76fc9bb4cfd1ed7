#include "server/model/shard_plan.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

struct Heads {
  Range q, kv;
};

Heads HeadsOf(const ModelConfig& config, int rank, int world_size) {
  const int64_t group = config.n_heads / config.n_kv_heads;
  Heads h;
  if (world_size <= config.n_kv_heads) {
    h.kv = EvenSplit(config.n_kv_heads, world_size, rank);
    h.q = {h.kv.begin * group, h.kv.end * group};
  } else {
    h.q = EvenSplit(config.n_heads, world_size, rank);
    h.kv = {h.q.begin / group, (h.q.end - 1) / group + 1};
  }
  return h;
}

// The FFN columns of `rank`, in granules of `granules`, chosen so that each rank's layer
// weights come out about equal. In units of d_model values per layer, a rank's attention holds
// (q + 2 kv) * head_dim rows of wqkv and q * head_dim columns of wo, and each FFN column
// 3 (gate, up, down); every rank aims at 1/P of the total.
Range BalancedFfn(const ModelConfig& config, int rank, int world_size, int64_t granules,
                  int64_t granule) {
  std::vector<double> attention(world_size);
  double total = 3.0 * static_cast<double>(config.ffn_dim);
  for (int r = 0; r < world_size; ++r) {
    const Heads h = HeadsOf(config, r, world_size);
    attention[r] = 2.0 * static_cast<double>((h.q.size() + h.kv.size()) * config.head_dim);
    total += attention[r];
  }
  // Boundaries in granules: b[0] = 0 <= b[1] <= ... <= b[P] = granules, at least one each.
  std::vector<int64_t> b(world_size + 1, 0);
  double columns = 0;
  for (int r = 0; r < world_size; ++r) {
    columns += std::max(0.0, (total / world_size - attention[r]) / 3.0);
    const int64_t want = std::llround(columns / static_cast<double>(granule));
    b[r + 1] = std::clamp<int64_t>(want, b[r] + 1, granules - (world_size - r - 1));
  }
  b[world_size] = granules;
  return {b[rank] * granule, b[rank + 1] * granule};
}

}  // namespace

std::string ShardPlan::DebugString() const {
  return absl::StrCat("rank ", rank, "/", world_size, ": q_heads [", q_heads.begin, ",",
                      q_heads.end, ") kv_heads [", kv_heads.begin, ",", kv_heads.end, ") ffn [",
                      ffn.begin, ",", ffn.end, ") vocab [", vocab.begin, ",", vocab.end, ")");
}

absl::StatusOr<ShardPlan> MakeShardPlan(const ModelConfig& config, int rank, int world_size,
                                        int64_t ffn_granule) {
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
  const Heads heads = HeadsOf(config, rank, world_size);
  plan.q_heads = heads.q;
  plan.kv_heads = heads.kv;

  const int64_t granule = config.ffn_dim % ffn_granule == 0 ? ffn_granule : 1;
  const int64_t granules = config.ffn_dim / granule;
  if (world_size > granules) {
    return absl::InvalidArgumentError(absl::StrCat("world_size ", world_size, " exceeds the ",
                                                   granules, " FFN granules of ", granule,
                                                   " columns"));
  }
  plan.ffn = BalancedFfn(config, rank, world_size, granules, granule);
  plan.vocab = EvenSplit(config.vocab_size, world_size, rank);
  return plan;
}

}  // namespace tpserve::model
