#include "server/cli/in_process_executor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/common/status_macros.h"
#include "server/model/plan/shard_plan.h"
#include "server/protocol/step_codec.h"

namespace tpserve::cli {

InProcessExecutor::InProcessExecutor(const model::WeightSource& weights, InProcessOptions options)
    : weights_(weights), options_(options) {}

InProcessExecutor::InProcessExecutor(std::unique_ptr<const model::WeightSource> weights,
                                     InProcessOptions options)
    : owned_weights_(std::move(weights)), weights_(*owned_weights_), options_(options) {}

absl::Status InProcessExecutor::Start() {
  model_.reset();
  if (rank_.backend == nullptr) {
    const worker::RankDevice where{.device = options_.device, .threads = options_.threads};
    ASSIGN_OR_RETURN(rank_, worker::BuildRank(where, /*store=*/nullptr, worker::CommSpec{},
                                              worker::DefaultCommFactory()));
  }
  ASSIGN_OR_RETURN(model::ShardPlan plan, model::MakeShardPlan(weights_.config(), 0, 1));
  engine::EngineOptions engine;
  engine.max_batch_tokens = std::max<int64_t>(1, options_.max_batch_tokens);
  engine.max_logit_rows = std::max<int64_t>(1, options_.max_sequences);
  engine.kv_block_size = kKvBlockSize;
  if (options_.kv_blocks <= 0 && options_.kv_budget_bytes > 0) {
    engine.kv_budget_bytes = options_.kv_budget_bytes;
    engine.kv_blocks = 0;  // what fits in the budget
  } else {
    engine.kv_blocks = std::max<int64_t>(1, options_.kv_blocks);
  }
  engine.dequantize = options_.dequantize;
  engine.tp_invariant = options_.tp_invariant;
  absl::StatusOr<std::unique_ptr<engine::LlamaModel>> model =
      engine::LlamaModel::Load(weights_, plan, rank_.backend.get(), rank_.comm.get(), engine);
  if (!model.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("loading the model: ", model.status().message()));
  }
  model_ = *std::move(model);
  return absl::OkStatus();
}

absl::StatusOr<coordinator::StepOutcome> InProcessExecutor::RunStep(
    const tpserve::v1::Step& step, const coordinator::StepMaskFill& masks) {
  if (model_ == nullptr) return absl::UnavailableError("the model is not loaded");
  const int64_t start_ns = absl::GetCurrentTimeNanos();
  const auto vocab = static_cast<int32_t>(model_->config().vocab_size);
  coordinator::StepOutcome outcome;
  outcome.result.set_step_id(step.step_id());
  absl::StatusOr<protocol::DecodedStep> decoded = protocol::DecodeStep(step, vocab);
  absl::Status status = decoded.status();
  if (status.ok()) status = model_->Forward(decoded->batch, &logits_);
  tpserve::v1::StepMasks step_masks;  // one process: computed after the forward pass
  if (status.ok() && step.masks_follow()) {
    if (masks == nullptr) {
      status = absl::InvalidArgumentError("Step: masks_follow without masks");
    } else {
      masks(&step_masks);
      status = protocol::ApplyStepMasks(step_masks, step.step_id(), vocab, &*decoded);
    }
  }
  if (status.ok()) {
    status = protocol::SampleDecodedStep(*decoded, logits_, vocab, &sampler_, &outcome.result);
  }
  if (!status.ok()) {
    model_.reset();  // down until the next Start(), as a worker world would be
    return status;
  }
  const int64_t end_ns = absl::GetCurrentTimeNanos();
  outcome.wall = absl::Nanoseconds(end_ns - start_ns);
  outcome.compute_ns = {static_cast<uint64_t>(end_ns - start_ns)};
  outcome.comm_ns = {0};
  outcome.times = {{.sent = start_ns,
                    .received = start_ns,
                    .started = start_ns,
                    .finished = end_ns,
                    .returned = end_ns}};
  return outcome;
}

int64_t InProcessExecutor::kv_blocks() const { return model_ != nullptr ? model_->kv_blocks() : 0; }

std::string InProcessExecutor::comm_backend() const {
  return rank_.comm != nullptr ? std::string(rank_.comm->backend_name()) : "local";
}

}  // namespace tpserve::cli
