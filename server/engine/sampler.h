// Sampler: turns one sequence's logits into its next token. Greedy or temperature sampling
// with top-k, top-p and min-p truncation; repetition, frequency and presence penalties;
// a counter-based draw so that the i-th token of a request is a pure function of
// (seed, i, logits); log-probabilities of the chosen token and the top n.
// Stateless apart from scratch buffers: one Sampler per thread.
#ifndef TPSERVE_SERVER_ENGINE_SAMPLER_H_
#define TPSERVE_SERVER_ENGINE_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tpserve::engine {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off; in (0, 1]
  float min_p = 0.0f;               // 0: off; in [0, 1]
  float repetition_penalty = 1.0f;  // 1: off; > 0; prompt and generated tokens
  float frequency_penalty = 0.0f;   // 0: off; generated tokens, times their count
  float presence_penalty = 0.0f;    // 0: off; generated tokens, once each
  uint64_t seed = 0;
  uint32_t logprobs = 0;                // top-n alternatives to report
  std::vector<int32_t> stop_token_ids;  // besides EOS
};

// What the penalties look at.
struct TokenHistory {
  absl::Span<const int32_t> prompt;
  absl::Span<const int32_t> generated;
};

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token_id = 0;
  // Log-probability of the token under the model's distribution after penalties and
  // temperature (temperature 1 when greedy), before top-k / top-p / min-p truncation.
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // params.logprobs best tokens of that distribution
  bool is_stop = false;           // token is one of params.stop_token_ids
};

// Checks the ranges the proto documents; InvalidArgument naming the field otherwise.
absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t vocab_size);

class Sampler {
 public:
  // Samples from `logits` ([vocab]); `index` is the position of the token among the
  // request's generated tokens (the generator's counter).
  SampleResult Sample(absl::Span<const float> logits, const SamplingParams& params,
                      const TokenHistory& history, uint64_t index);

 private:
  // Penalised logits, then candidate ids, reused across calls.
  std::vector<float> scratch_logits_;
  std::vector<int32_t> candidates_;
  std::vector<double> probs_;
};

// Applies the three penalties to `logits` in place (exposed for tests).
void ApplyPenalties(absl::Span<float> logits, const SamplingParams& params,
                    const TokenHistory& history);

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_SAMPLER_H_
