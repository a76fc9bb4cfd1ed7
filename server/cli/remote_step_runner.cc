#include "server/cli/remote_step_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/common/status_macros.h"
#include "server/protocol/step_codec.h"

namespace tpserve::cli {

absl::StatusOr<std::unique_ptr<RemoteStepRunner>> RemoteStepRunner::Create(
    coordinator::WorkerPoolOptions options) {
  auto pool = std::make_unique<coordinator::WorkerPool>(std::move(options));
  RETURN_IF_ERROR(pool->Start());
  return std::unique_ptr<RemoteStepRunner>(new RemoteStepRunner(std::move(pool)));
}

RemoteStepRunner::~RemoteStepRunner() {
  for (size_t r = 0; r < compute_ns_.size(); ++r) {
    LOG(INFO) << "rank " << r << ": " << next_step_id_ - 1 << " steps, compute "
              << compute_ns_[r] / 1000000 << " ms, collectives " << comm_ns_[r] / 1000000 << " ms";
  }
  pool_->Shutdown("generation finished");
}

absl::StatusOr<std::optional<engine::SampleResult>> RemoteStepRunner::Run(
    const SequenceStep& step, const engine::SamplingParams& params,
    const engine::TokenHistory& history) {
  tpserve::v1::Step request;
  request.set_step_id(next_step_id_++);
  protocol::AddStepSequence({.seq_id = 1,
                             .tokens = step.tokens,
                             .start_pos = step.start_pos,
                             .block_table = step.block_table,
                             .sample = step.sample,
                             .sample_index = step.sample_index},
                            params, history, &request);
  ASSIGN_OR_RETURN(coordinator::StepOutcome outcome, pool_->RunStep(request));
  compute_ns_.resize(outcome.compute_ns.size());
  comm_ns_.resize(outcome.comm_ns.size());
  for (size_t r = 0; r < outcome.compute_ns.size(); ++r) {
    compute_ns_[r] += outcome.compute_ns[r];
    comm_ns_[r] += outcome.comm_ns[r];
  }
  if (!step.sample) return std::nullopt;
  if (outcome.result.tokens_size() != 1) {
    return absl::InternalError(absl::StrCat("step ", request.step_id(), ": rank 0 returned ",
                                            outcome.result.tokens_size(), " tokens, want 1"));
  }
  return protocol::FromSampledToken(outcome.result.tokens(0), params);
}

}  // namespace tpserve::cli
