#include "server/protocol/session_codec.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tpserve::protocol {

tpserve::v1::Init EncodeInit(const WorldAssignment& world) {
  tpserve::v1::Init init;
  init.set_model_path(world.model_path);
  init.set_rank(static_cast<uint32_t>(world.rank));
  init.set_world_size(static_cast<uint32_t>(world.world_size));
  init.set_backend(world.backend);
  init.set_kv_budget_bytes(world.kv_budget_bytes);
  init.set_kv_block_size(world.kv_block_size);
  init.set_world_generation(world.world_generation);
  init.set_comm_host(world.comm_host);
  init.set_comm_timeout_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(world.comm_timeout)));
  init.set_threads(world.threads);
  init.set_dequantize(world.dequantize);
  init.set_float_row_sums(world.float_row_sums);
  init.set_step_link(world.step_link);
  init.set_coordinator_epoch(world.coordinator_epoch);
  init.set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(world.heartbeat_interval)));
  return init;
}

WorldAssignment DecodeInit(const tpserve::v1::Init& init) {
  WorldAssignment world;
  world.model_path = init.model_path();
  world.rank = static_cast<int>(init.rank());
  world.world_size = static_cast<int>(init.world_size());
  world.backend = init.backend();
  world.kv_budget_bytes = init.kv_budget_bytes();
  world.kv_block_size = init.kv_block_size();
  world.world_generation = init.world_generation();
  world.comm_host = init.comm_host();
  world.comm_timeout = absl::Milliseconds(init.comm_timeout_ms());
  world.threads = init.threads();
  world.dequantize = init.dequantize();
  world.float_row_sums = init.float_row_sums();
  world.step_link = init.step_link();
  world.coordinator_epoch = init.coordinator_epoch();
  world.heartbeat_interval = absl::Milliseconds(init.heartbeat_interval_ms());
  return world;
}

tpserve::v1::Ready EncodeReady(const WorkerHoldings& holdings) {
  tpserve::v1::Ready ready;
  ready.set_kv_blocks(static_cast<uint32_t>(holdings.kv_blocks));
  ready.set_weight_bytes(holdings.weight_bytes);
  ready.set_kv_bytes(holdings.kv_bytes);
  ready.set_vocab_size(static_cast<uint32_t>(holdings.vocab_size));
  ready.set_comm_backend(holdings.comm_backend);
  ready.set_threads(static_cast<uint32_t>(holdings.threads));
  ready.set_step_link(holdings.step_link);
  ready.set_exact_row_sums(holdings.exact_row_sums);
  return ready;
}

int64_t MaxKvBlocks(uint64_t kv_budget_bytes, uint32_t kv_block_size) {
  const uint64_t bound = kv_budget_bytes / (2 * static_cast<uint64_t>(std::max(1u, kv_block_size)));
  return static_cast<int64_t>(std::min<uint64_t>(bound, std::numeric_limits<int32_t>::max()));
}

absl::StatusOr<WorkerHoldings> DecodeReady(const tpserve::v1::Ready& ready, int32_t vocab_size,
                                           int64_t max_kv_blocks) {
  if (ready.kv_blocks() < 1) return absl::FailedPreconditionError("Ready: kv_blocks is 0");
  if (ready.kv_blocks() > max_kv_blocks) {
    return absl::FailedPreconditionError(
        absl::StrCat("Ready: kv_blocks ", ready.kv_blocks(), " exceeds ", max_kv_blocks,
                     ", the most the KV budget sent in Init can hold"));
  }
  if (vocab_size > 0 && ready.vocab_size() != static_cast<uint32_t>(vocab_size)) {
    return absl::FailedPreconditionError(absl::StrCat("Ready: vocab_size ", ready.vocab_size(),
                                                      " where the model has ", vocab_size));
  }
  WorkerHoldings holdings;
  holdings.kv_blocks = ready.kv_blocks();
  holdings.weight_bytes = ready.weight_bytes();
  holdings.kv_bytes = ready.kv_bytes();
  holdings.vocab_size = static_cast<int32_t>(ready.vocab_size());
  holdings.comm_backend = ready.comm_backend();
  holdings.threads = static_cast<int>(ready.threads());
  holdings.step_link = ready.step_link();
  holdings.exact_row_sums = ready.exact_row_sums();
  return holdings;
}

}  // namespace tpserve::protocol
