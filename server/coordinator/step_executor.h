// StepExecutor: the world a BatchEngine runs its steps on — a Step in, rank 0's sampled
// tokens out — and the lifecycle of that world: Start builds it with a fresh, empty KV cache of
// kv_blocks() blocks, and any failed step leaves it down (its cache lost) until the next
// Start. Two implementations: WorkerPool (a world of `tpserve worker` processes) and
// cli::InProcessExecutor (the whole model in this process, for `tpserve generate`); tests
// fake it. Implementations say how they may be called from threads; BatchEngine calls them
// from its loop thread only.
#ifndef TPSERVE_SERVER_COORDINATOR_STEP_EXECUTOR_H_
#define TPSERVE_SERVER_COORDINATOR_STEP_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::coordinator {

// Where one rank's part of a step went, in nanoseconds since the Unix epoch: sent and
// returned on the coordinator's clock, the rest on the worker's (comparable on one host).
struct RankStepTimes {
  int64_t sent = 0;      // the coordinator began writing the Step to this rank
  int64_t received = 0;  // the worker's reader got it
  int64_t started = 0;   // the worker's executor began it
  int64_t finished = 0;  // its result was ready to write
  int64_t returned = 0;  // the coordinator's reader got the result
};

// The joined result of one step.
struct StepOutcome {
  tpserve::v1::StepResult result;    // rank 0's: the sampled tokens
  std::vector<uint64_t> compute_ns;  // [world_size] per rank
  std::vector<uint64_t> comm_ns;     // [world_size] per rank
  std::vector<RankStepTimes> times;  // [world_size] per rank
  absl::Duration wall;               // fan-out to the last result
};

// Fills a step's structured-output masks (StepMasks.masks; its step_id is the executor's to
// set). An executor calls it once the Step is on its way, so that the masks are computed while
// the world runs the forward pass, and hands them to rank 0 alone.
using StepMaskFill = std::function<void(tpserve::v1::StepMasks*)>;

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;

  // Builds a new world, tearing down the previous one: every KV block is free and holds
  // nothing. On failure the world is down and the Status says why; FAILED_PRECONDITION when
  // the world refused to be built (e.g. the model does not load), which retrying will not mend.
  virtual absl::Status Start() = 0;

  // Runs `step` (its sequences' tokens, positions, block tables and sampling) and returns
  // rank 0's sampled tokens, one per sampling sequence in the Step's order, checked against
  // the vocabulary. With step.masks_follow(), `masks` (then required) gives the masks rank 0
  // samples under. Any error leaves the world down until the next Start().
  virtual absl::StatusOr<StepOutcome> RunStep(const tpserve::v1::Step& step,
                                              const StepMaskFill& masks) = 0;
  // A step without masks.
  absl::StatusOr<StepOutcome> RunStep(const tpserve::v1::Step& step) {
    return RunStep(step, nullptr);
  }

  // The world's KV cache: blocks and tokens per block. Valid after a successful Start().
  virtual int64_t kv_blocks() const = 0;
  virtual int64_t kv_block_size() const = 0;
  // The communicator the world's ranks use ("shm", "gloo", "nccl", "local"); valid after a
  // successful Start().
  virtual std::string comm_backend() const = 0;
  // Between steps: OK while the world is up; why it went down otherwise (e.g. a worker found
  // hung while idle), which the next RunStep would also fail with.
  virtual absl::Status health() const { return absl::OkStatus(); }
  // The worker the last failure blamed (its position in the configured list, which is its rank
  // in a full world); -1 when none is named.
  virtual int down_rank() const { return -1; }
  // The workers (positions in the configured list) of the world now up, in rank order: all of
  // them, unless an elastic world shrank. Valid after a successful Start().
  virtual std::vector<int> world_members() const { return {0}; }
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_STEP_EXECUTOR_H_
