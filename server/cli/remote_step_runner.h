// RemoteStepRunner: the StepRunner of `tpserve generate --workers`: each step goes to a
// world of workers through a WorkerPool (which it owns and shuts down), and worker rank 0
// samples. The sequence is seq_id 1; steps are numbered from 1.
#ifndef TPSERVE_SERVER_CLI_REMOTE_STEP_RUNNER_H_
#define TPSERVE_SERVER_CLI_REMOTE_STEP_RUNNER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "server/cli/step_runner.h"
#include "server/coordinator/worker_pool.h"

namespace tpserve::cli {

class RemoteStepRunner final : public StepRunner {
 public:
  // Starts the world described by `options` (bounded by its ready_timeout).
  static absl::StatusOr<std::unique_ptr<RemoteStepRunner>> Create(
      coordinator::WorkerPoolOptions options);
  ~RemoteStepRunner() override;

  int64_t kv_blocks() const override { return pool_->kv_blocks(); }
  absl::StatusOr<std::optional<engine::SampleResult>> Run(
      const SequenceStep& step, const engine::SamplingParams& params,
      const engine::TokenHistory& history) override;

 private:
  explicit RemoteStepRunner(std::unique_ptr<coordinator::WorkerPool> pool)
      : pool_(std::move(pool)) {}

  std::unique_ptr<coordinator::WorkerPool> pool_;
  uint64_t next_step_id_ = 1;
  std::vector<uint64_t> compute_ns_;  // [world_size] summed over the steps
  std::vector<uint64_t> comm_ns_;     // [world_size] summed over the steps
};

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_REMOTE_STEP_RUNNER_H_
