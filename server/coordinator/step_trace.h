// StepTrace: one JSON line per worker step (--step_trace_file), for measuring where a step's
// time goes: the coordinator's wall time from fan-out to the last result, the overhead (the
// part that is neither compute nor collectives), and per rank its compute and collective time
// and where its overhead went (Step write to the worker's reader, reader to executor, result
// ready to the coordinator's reader; across hosts these mix two clocks).
//   {"step":7,"sequences":16,"tokens":16,"wall_us":8123.4,"overhead_us":61.2,
//    "compute_us":[7901.0,7655.3],"comm_us":[160.2,400.8],"dispatch_us":[20.1,31.0],
//    "queue_us":[9.8,8.7],"return_us":[25.3,40.2]}
// Owned and written by the batch engine's loop thread only; not thread-safe.
#ifndef TPSERVE_SERVER_COORDINATOR_STEP_TRACE_H_
#define TPSERVE_SERVER_COORDINATOR_STEP_TRACE_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/coordinator/step_executor.h"

namespace tpserve::coordinator {

// Non-compute, non-collective time of a step: the coordinator's wall time less the slowest
// rank's compute plus collective time (zero when the ranks' clocks say more).
absl::Duration StepOverhead(const StepOutcome& outcome);

class StepTrace {
 public:
  // Creates (truncates) `path`; FailedPrecondition naming it when it cannot be written.
  static absl::StatusOr<std::unique_ptr<StepTrace>> Open(const std::string& path);

  void Record(uint64_t step_id, int64_t sequences, int64_t tokens, const StepOutcome& outcome);

 private:
  explicit StepTrace(std::ofstream out) : out_(std::move(out)) {}
  std::ofstream out_;
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_STEP_TRACE_H_
