// StepRunner: how `tpserve generate` runs the forward steps of its one sequence and samples
// its tokens, whether in this process (LocalStepRunner: LlamaModel + Sampler, world of one)
// or on a world of workers (RemoteStepRunner: WorkerPool, sampling on rank 0). The token
// loop in generate_command.cc is written once over this interface. Not thread-safe.
#ifndef TPSERVE_SERVER_CLI_STEP_RUNNER_H_
#define TPSERVE_SERVER_CLI_STEP_RUNNER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/sampler.h"

namespace tpserve::cli {

// One step of the sequence: a prefill chunk or one decode token.
struct SequenceStep {
  std::vector<int32_t> tokens;       // new tokens
  int32_t start_pos = 0;             // position of tokens[0]
  std::vector<int32_t> block_table;  // KV blocks covering [0, start_pos + tokens)
  bool sample = false;               // sample a token after this step
  uint64_t sample_index = 0;         // index of that token among the generated ones
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // KV blocks the sequence may use.
  virtual int64_t kv_blocks() const = 0;
  // Runs `step`; when step.sample, returns the token drawn with `params` and `history`
  // (prompt and generated tokens so far), else nullopt.
  virtual absl::StatusOr<std::optional<engine::SampleResult>> Run(
      const SequenceStep& step, const engine::SamplingParams& params,
      const engine::TokenHistory& history) = 0;
};

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_STEP_RUNNER_H_
