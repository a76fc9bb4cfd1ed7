#include "server/worker/init_validator.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/comm/host_layout.h"
#include "server/common/status_macros.h"
#include "server/worker/rank_factory.h"

namespace tpserve::worker {
namespace {

constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxHostBytes = 255;

absl::Status AboveLimit(absl::string_view field, uint64_t value, uint64_t limit) {
  return absl::InvalidArgumentError(
      absl::StrCat("Init: ", field, " ", value, " is above the limit of ", limit));
}

absl::Status CheckHeartbeatInterval(uint32_t ms) {
  if (ms == 0) return absl::OkStatus();  // no heartbeats
  if (ms < kMinHeartbeatIntervalMs) {
    return absl::InvalidArgumentError(absl::StrCat("Init: heartbeat_interval_ms ", ms,
                                                   " is below the limit of ",
                                                   kMinHeartbeatIntervalMs, " (0: none)"));
  }
  if (ms > kMaxHeartbeatIntervalMs) {
    return AboveLimit("heartbeat_interval_ms", ms, kMaxHeartbeatIntervalMs);
  }
  return absl::OkStatus();
}

}  // namespace

InitLimits HostInitLimits() {
  InitLimits limits;
  limits.max_threads = static_cast<uint32_t>(std::max(1, comm::UsableCpus()));
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_bytes = ::sysconf(_SC_PAGESIZE);
  limits.max_kv_bytes =
      pages > 0 && page_bytes > 0 ? static_cast<uint64_t>(pages) * page_bytes / 2 : 1ull << 30;
  limits.max_world_size = 1024;
  limits.max_kv_block_size = 256;
  return limits;
}

absl::Status ValidateInit(const tpserve::v1::Init& init, int device, const InitLimits& limits) {
  if (init.world_size() == 0) return absl::InvalidArgumentError("Init: world_size must be >= 1");
  if (init.world_size() > limits.max_world_size) {
    return AboveLimit("world_size", init.world_size(), limits.max_world_size);
  }
  if (init.rank() >= init.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Init: rank ", init.rank(), " is out of range for world_size ", init.world_size()));
  }
  if (init.threads() > limits.max_threads) {
    return AboveLimit("threads", init.threads(), limits.max_threads);
  }
  if (init.kv_budget_bytes() > limits.max_kv_bytes) {
    return AboveLimit("kv_budget_bytes", init.kv_budget_bytes(), limits.max_kv_bytes);
  }
  if (init.kv_block_size() > limits.max_kv_block_size) {
    return AboveLimit("kv_block_size", init.kv_block_size(), limits.max_kv_block_size);
  }
  if (init.comm_host().size() > kMaxHostBytes) {
    return AboveLimit("comm_host length", init.comm_host().size(), kMaxHostBytes);
  }
  RETURN_IF_ERROR(CheckHeartbeatInterval(init.heartbeat_interval_ms()));
  if (init.coordinator_epoch() > limits.max_coordinator_epoch) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init: coordinator_epoch ", init.coordinator_epoch(), " is later than ",
                     limits.max_coordinator_epoch, " (this host's clock, unix ns, plus one hour)"));
  }
  RankDevice where;
  where.device = device;
  RETURN_IF_ERROR(CheckRankBackend(init.backend(), where));
  if (init.model_path().empty()) return absl::InvalidArgumentError("Init: model_path is empty");
  if (init.model_path().size() > kMaxPathBytes ||
      init.model_path().find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("Init: model_path must be at most ",
                                                   kMaxPathBytes, " bytes with no NUL byte"));
  }
  return absl::OkStatus();
}

}  // namespace tpserve::worker
