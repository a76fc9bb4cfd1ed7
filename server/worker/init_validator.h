// File: server/worker/init_validator.h
//
// ValidateInit: the one check a worker makes of a Session's Init before it acts on any of
// it (opens a model, sizes a KV cache, starts threads, joins a world). Whoever sent it, an
// Init that passes cannot make the worker abort, exhaust the host's memory or threads, or
// name a model path longer than a path can be. (Where the model may be is ModelRoot's
// check, made next.) Pure; thread-safe.
#ifndef TPSERVE_SERVER_WORKER_INIT_VALIDATOR_H_
#define TPSERVE_SERVER_WORKER_INIT_VALIDATOR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::worker {

// What this worker accepts in an Init.
struct InitLimits {
  uint32_t max_threads = 0;     // compute threads (0 for Init: this host's share)
  uint64_t max_kv_bytes = 0;    // KV cache budget
  uint32_t max_world_size = 0;  // ranks in a world
  uint32_t max_kv_block_size = 0;
  // coordinator_epoch (a coordinator's start time, unix ns): a later one would take this
  // worker over and lock out every real coordinator until it restarts. WorkerSession sets
  // it to now + kMaxEpochAhead when it checks an Init.
  uint64_t max_coordinator_epoch = UINT64_MAX;
};

// How far ahead of this host's clock a coordinator's epoch may be: clocks of a cluster's
// hosts differ by far less, and a forged epoch locks real coordinators out for no longer.
inline constexpr int64_t kMaxEpochAheadNs = 3600LL * 1000 * 1000 * 1000;

// Heartbeat intervals an Init may ask for, in milliseconds (0: no heartbeats): often enough
// to name a hung worker within a coordinator's hang timeout, seldom enough not to flood the
// stream.
inline constexpr uint32_t kMinHeartbeatIntervalMs = 10;
inline constexpr uint32_t kMaxHeartbeatIntervalMs = 60000;

// This host's limits: threads up to its usable CPUs, a KV cache of at most half its
// physical memory, worlds of up to 1024 ranks, KV blocks of up to 256 tokens.
InitLimits HostInitLimits();

// OK when `init` is within `limits` and can be served on `device` (-1: the CPU): rank <
// world_size, a backend this worker has (GLOO; NCCL on a GPU), a model path of a sane size,
// a heartbeat interval of 0 or within [kMinHeartbeatIntervalMs, kMaxHeartbeatIntervalMs],
// a coordinator_epoch of at most max_coordinator_epoch.
// InvalidArgument (a field out of its range, naming it and the limit) or FailedPrecondition (cannot
// be served here).
absl::Status ValidateInit(const tpserve::v1::Init& init, int device, const InitLimits& limits);

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_INIT_VALIDATOR_H_
