// Step encoding shared by every driver of a worker world (the serving engine and
// `tpserve generate --workers`): one sequence's share of a Step, and rank 0's sampled token
// back in engine terms. Stateless.
#ifndef TPSERVE_SERVER_COORDINATOR_STEP_CODEC_H_
#define TPSERVE_SERVER_COORDINATOR_STEP_CODEC_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "server/engine/sampler.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::coordinator {

struct StepSequenceSpec {
  uint64_t seq_id = 0;
  absl::Span<const int32_t> tokens;       // the new tokens
  int64_t start_pos = 0;                  // position of tokens[0]
  absl::Span<const int32_t> block_table;  // KV blocks covering [0, start_pos + tokens)
  bool sample = false;                    // sample after this step
  uint64_t sample_index = 0;              // index of that token among the generated ones
};

// Appends `spec` to `step`. When sampling, carries `params` and — only if a penalty is on —
// the history (prompt then generated: the worker takes the last sample_index as generated).
void AddStepSequence(const StepSequenceSpec& spec, const engine::SamplingParams& params,
                     const engine::TokenHistory& history, tpserve::v1::Step* step);

// A worker's SampledToken as a SampleResult (is_stop from params.stop_token_ids).
engine::SampleResult FromSampledToken(const tpserve::v1::SampledToken& token,
                                      const engine::SamplingParams& params);

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_STEP_CODEC_H_
