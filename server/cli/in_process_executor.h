// InProcessExecutor: the StepExecutor of `tpserve generate` without --workers: the whole model
// (a world of one rank) in this process, on the CPU or on one GPU (the rank a worker would
// build, worker::BuildRank), sampled here. Steps are decoded and
// the draws encoded by the workers' own codec (protocol::DecodeStep, SampleDecodedStep), so a
// token is drawn exactly as a worker's rank 0 draws it. Owns the backend, the communicator and
// the model. Not thread-safe: one caller (BatchEngine's loop thread).
#ifndef TPSERVE_SERVER_CLI_IN_PROCESS_EXECUTOR_H_
#define TPSERVE_SERVER_CLI_IN_PROCESS_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/comm/communicator.h"
#include "server/coordinator/step_executor.h"
#include "server/engine/llama_model.h"
#include "server/engine/sampler.h"
#include "server/model/weights/weight_source.h"
#include "server/worker/rank_factory.h"

namespace tpserve::cli {

struct InProcessOptions {
  int64_t kv_blocks = 1;           // KV cache capacity, in blocks of kKvBlockSize tokens
  int64_t kv_budget_bytes = 0;     // > 0 (with kv_blocks 0): the capacity is what fits in it
  int64_t max_batch_tokens = 256;  // tokens computed per step, all sequences together
  int64_t max_sequences = 1;       // sequences sampled per step (logit rows)
  int threads = 1;                 // compute threads (CPU)
  int device = -1;                 // CUDA ordinal to compute on; -1: the CPU
  bool dequantize = false;         // exact mode (EngineOptions::dequantize)
  bool tp_invariant = true;        // the canonical path (EngineOptions::tp_invariant)
};

class InProcessExecutor final : public coordinator::StepExecutor {
 public:
  // `weights` must outlive the executor: Start() loads the model from it.
  InProcessExecutor(const model::WeightSource& weights, InProcessOptions options);
  // Owns `weights` (a draft model's: serve --speculative draft).
  InProcessExecutor(std::unique_ptr<const model::WeightSource> weights, InProcessOptions options);

  // Loads the model afresh (an empty KV cache); FAILED_PRECONDITION when it does not load,
  // InvalidArgument when the device is one this build cannot compute on.
  absl::Status Start() override;
  using coordinator::StepExecutor::RunStep;
  absl::StatusOr<coordinator::StepOutcome> RunStep(const tpserve::v1::Step& step,
                                                   const coordinator::StepMaskFill& masks) override;
  int64_t kv_blocks() const override;
  int64_t kv_block_size() const override { return kKvBlockSize; }
  std::string comm_backend() const override;

 private:
  std::unique_ptr<const model::WeightSource> owned_weights_;  // null: borrowed
  const model::WeightSource& weights_;
  const InProcessOptions options_;
  // Declared before the model, which borrows both: destroyed after it.
  worker::RankResources rank_;                 // empty until the first Start()
  std::unique_ptr<engine::LlamaModel> model_;  // null while the world is down
  engine::Sampler sampler_;
  std::vector<float> logits_;  // [sampled sequences, vocab]
};

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_IN_PROCESS_EXECUTOR_H_
