#include "server/cli/remote_step_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/common/status_macros.h"

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
  tpserve::v1::StepSequence* seq = request.add_sequences();
  seq->set_seq_id(1);
  seq->mutable_token_ids()->Add(step.tokens.begin(), step.tokens.end());
  seq->set_start_pos(static_cast<uint32_t>(step.start_pos));
  for (int32_t block : step.block_table) seq->add_block_table(static_cast<uint32_t>(block));
  seq->set_sample(step.sample);
  seq->set_sample_index(static_cast<uint32_t>(step.sample_index));
  if (step.sample) {
    tpserve::v1::SamplingParams* p = seq->mutable_sampling();
    p->set_temperature(params.temperature);
    p->set_top_k(params.top_k);
    p->set_top_p(params.top_p);
    p->set_min_p(params.min_p);
    p->set_repetition_penalty(params.repetition_penalty);
    p->set_frequency_penalty(params.frequency_penalty);
    p->set_presence_penalty(params.presence_penalty);
    p->set_seed(params.seed);
    p->set_logprobs(params.logprobs);
    if (params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
        params.presence_penalty != 0.0f) {
      // The worker splits them back: the last sample_index ids are the generated ones.
      seq->mutable_penalty_token_ids()->Add(history.prompt.begin(), history.prompt.end());
      seq->mutable_penalty_token_ids()->Add(history.generated.begin(), history.generated.end());
    }
  }
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
  const tpserve::v1::SampledToken& t = outcome.result.tokens(0);
  engine::SampleResult r;
  r.token_id = t.token_id();
  r.logprob = t.logprob();
  for (int i = 0; i < t.top_token_ids_size() && i < t.top_logprobs_size(); ++i) {
    r.top.push_back({t.top_token_ids(i), t.top_logprobs(i)});
  }
  for (int32_t stop : params.stop_token_ids) r.is_stop = r.is_stop || stop == r.token_id;
  return r;
}

}  // namespace tpserve::cli
