// LocalStepRunner: the StepRunner of offline generation: this rank's whole model (world of
// one) on a CpuBackend, sampled in process. Owns the backend, communicator and model.
#ifndef TPSERVE_SERVER_CLI_LOCAL_STEP_RUNNER_H_
#define TPSERVE_SERVER_CLI_LOCAL_STEP_RUNNER_H_

#include <memory>
#include <vector>

#include "server/cli/step_runner.h"
#include "server/comm/communicator.h"
#include "server/engine/cpu_backend.h"
#include "server/engine/llama_model.h"
#include "server/model/weights/weight_source.h"

namespace tpserve::cli {

class LocalStepRunner final : public StepRunner {
 public:
  // Loads `weights` for `max_tokens` positions (prompt + generated) in chunks of at most
  // `max_chunk` tokens, on `threads` compute threads; `dequantize`: exact mode (EngineOptions).
  static absl::StatusOr<std::unique_ptr<LocalStepRunner>> Create(const model::WeightSource& weights,
                                                                 int64_t max_tokens,
                                                                 int64_t max_chunk, int threads,
                                                                 bool dequantize);

  int64_t kv_blocks() const override { return model_->kv_blocks(); }
  absl::StatusOr<std::optional<engine::SampleResult>> Run(
      const SequenceStep& step, const engine::SamplingParams& params,
      const engine::TokenHistory& history) override;

 private:
  explicit LocalStepRunner(int threads) : backend_(threads) {}

  engine::CpuBackend backend_;
  comm::SingleRankCommunicator comm_;
  std::unique_ptr<engine::LlamaModel> model_;
  engine::Sampler sampler_;
  std::vector<float> logits_;  // [1, vocab]
};

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_LOCAL_STEP_RUNNER_H_
