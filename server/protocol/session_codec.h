// The Session's setup messages, both directions, in one place: the coordinator's Init (which
// slice of which model a worker serves and how its world talks) and the worker's Ready (what
// it holds once loaded). Each side encodes from and decodes into a plain struct, so a new
// field touches the proto, this codec and the code that uses it. The decoders make the checks
// any receiver needs; a worker's host limits on an Init stay worker::ValidateInit's. Pure;
// thread-safe.
#ifndef TPSERVE_SERVER_PROTOCOL_SESSION_CODEC_H_
#define TPSERVE_SERVER_PROTOCOL_SESSION_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::protocol {

// What an Init asks of a worker.
struct WorldAssignment {
  std::string model_path;  // as the worker sees it (its model root resolves it)
  int rank = 0;
  int world_size = 1;
  tpserve::v1::CommBackend backend = tpserve::v1::COMM_BACKEND_AUTO;
  uint64_t kv_budget_bytes = 0;  // 0: the worker's default
  uint32_t kv_block_size = 0;    // 0: the worker's default
  uint64_t world_generation = 0;
  std::string comm_host;                               // empty: loopback
  absl::Duration comm_timeout = absl::ZeroDuration();  // zero: the worker's default
  uint32_t threads = 0;                                // 0: the host's share
  bool dequantize = false;                             // exact mode
  bool float_row_sums = false;                         // the canonical path off
  std::string step_link;                               // the shared-memory step link; empty: none
  // The coordinator's start time (unix ns): a later epoch takes a busy worker over; 0: none.
  uint64_t coordinator_epoch = 0;
  absl::Duration heartbeat_interval = absl::ZeroDuration();  // zero: no heartbeats
};

tpserve::v1::Init EncodeInit(const WorldAssignment& world);
// The fields of `init` (after worker::ValidateInit has accepted it).
WorldAssignment DecodeInit(const tpserve::v1::Init& init);

// What a Ready reports.
struct WorkerHoldings {
  int64_t kv_blocks = 0;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  int32_t vocab_size = 0;
  std::string comm_backend;  // "shm", "gloo", "nccl" or "local"
  int threads = 0;
  bool step_link = false;       // the worker takes its steps on the link
  bool exact_row_sums = false;  // the worker is on the canonical path
};

tpserve::v1::Ready EncodeReady(const WorkerHoldings& holdings);
// At most the KV blocks a worker given `kv_budget_bytes` can hold, blocks of `kv_block_size`
// tokens each taking at least 2 bytes (a K and a V byte) per token: the bound DecodeReady
// puts on Ready.kv_blocks, so that a peer cannot make the coordinator's block bookkeeping
// allocate more than the budget it chose. Also within the int32 block ids.
int64_t MaxKvBlocks(uint64_t kv_budget_bytes, uint32_t kv_block_size);

// The fields of `ready`, when it can be trusted: a KV cache of 1 to `max_kv_blocks` blocks
// (MaxKvBlocks) and the vocabulary the coordinator read from the model (`vocab_size`; 0: not
// known, not checked), whose ids the coordinator then checks sampled tokens against.
// FailedPrecondition naming the field otherwise.
absl::StatusOr<WorkerHoldings> DecodeReady(const tpserve::v1::Ready& ready, int32_t vocab_size,
                                           int64_t max_kv_blocks);

}  // namespace tpserve::protocol

#endif  // TPSERVE_SERVER_PROTOCOL_SESSION_CODEC_H_
