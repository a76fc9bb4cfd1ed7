#include "server/cli/local_step_runner.h"

#include <algorithm>

#include "server/common/status_macros.h"
#include "server/model/plan/shard_plan.h"

namespace tpserve::cli {

absl::StatusOr<std::unique_ptr<LocalStepRunner>> LocalStepRunner::Create(
    const model::WeightSource& weights, int64_t max_tokens, int64_t max_chunk, int threads,
    bool dequantize) {
  ASSIGN_OR_RETURN(model::ShardPlan plan, model::MakeShardPlan(weights.config(), 0, 1));
  std::unique_ptr<LocalStepRunner> runner(new LocalStepRunner(threads));
  engine::EngineOptions options;
  options.max_batch_tokens = std::max<int64_t>(1, max_chunk);
  options.max_logit_rows = 1;
  options.dequantize = dequantize;
  options.kv_blocks = (max_tokens + options.kv_block_size - 1) / options.kv_block_size;
  ASSIGN_OR_RETURN(runner->model_, engine::LlamaModel::Load(weights, plan, &runner->backend_,
                                                            &runner->comm_, options));
  return runner;
}

absl::StatusOr<std::optional<engine::SampleResult>> LocalStepRunner::Run(
    const SequenceStep& step, const engine::SamplingParams& params,
    const engine::TokenHistory& history) {
  engine::StepSequence seq;
  seq.tokens = step.tokens;
  seq.start_pos = step.start_pos;
  seq.block_table = step.block_table;
  seq.want_logits = step.sample;
  RETURN_IF_ERROR(model_->Forward(engine::StepBatch{{std::move(seq)}}, &logits_));
  if (!step.sample) return std::nullopt;
  return sampler_.Sample(logits_, params, history, step.sample_index);
}

}  // namespace tpserve::cli
