// Sampler: turns one sequence's logits into its next token. Greedy or temperature sampling
// with top-k, top-p and min-p truncation; repetition, frequency and presence penalties;
// a counter-based draw so that the i-th token of a request is a pure function of
// (seed, i, logits); log-probabilities of the chosen token and the top n.
// Stateless apart from scratch buffers: one Sampler per thread.
//
// Sample is a chain of steps, each a pure function declared below the class and testable
// alone, in the order it runs them: ApplyPenalties, Temper, TopK, TopP, MinP, Draw.
// Shapes: logits are [vocab]; after TopK, `candidates` are token ids in decreasing logit order
// and `weights` are aligned with them ([n_candidates]); a truncation step returns how many of
// the leading candidates stay (`keep`), and Draw picks among those.
#ifndef TPSERVE_SERVER_ENGINE_SAMPLER_H_
#define TPSERVE_SERVER_ENGINE_SAMPLER_H_

#include <cstddef>
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
  float typical_p = 1.0f;           // 1: off; in (0, 1]
  float repetition_penalty = 1.0f;  // 1: off; in [kMin.., kMaxRepetitionPenalty]; prompt and
                                    // generated tokens
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
  // temperature (temperature 1 when greedy), before top-k / top-p / min-p truncation; only
  // when params.logprobs > 0 (else 0: not computed).
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // params.logprobs best tokens of that distribution
};

// The repetition penalty's range: far enough from 0 that dividing a logit by it stays finite
// (1e-45 made NaN log-probabilities), and past any useful strength at the top.
inline constexpr float kMinRepetitionPenalty = 0.01f;
inline constexpr float kMaxRepetitionPenalty = 10.0f;

// Checks the ranges the proto documents; InvalidArgument naming the field otherwise.
absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t vocab_size);

// softmax(logits / t) over the whole vocabulary, kept as its normaliser (t = 1 when greedy,
// temperature 0): what Temper (step 2) computes. Logprobs are reported under it.
struct TemperedLogits {
  double temperature = 1.0;  // t
  int32_t argmax = 0;        // the highest logit; the lowest id wins a tie
  double max_scaled = 0.0;   // logits[argmax] / t
  double log_z = 0.0;        // log sum_i exp(logits[i] / t)

  // log softmax(logits / t)[id].
  float Logprob(absl::Span<const float> logits, int32_t id) const {
    return static_cast<float>(logits[id] / temperature - log_z);
  }
};

class Sampler {
 public:
  // Samples from `logits` ([vocab]); `index` is the position of the token among the
  // request's generated tokens (the generator's counter). A non-empty `allowed` (a bitmask
  // over the vocabulary, bit id % 8 of byte id / 8, at least one bit set) masks every other
  // token out first: no step below sees them, log-probabilities included.
  SampleResult Sample(absl::Span<const float> logits, const SamplingParams& params,
                      const TokenHistory& history, uint64_t index,
                      absl::Span<const uint8_t> allowed = {});

 private:
  // Top-k, top-p, min-p, typical, then the draw, over the penalised logits (temperature > 0).
  int32_t DrawTruncated(absl::Span<const float> logits, const TemperedLogits& tempered,
                        const SamplingParams& params, uint64_t index);

  // Penalised logits, candidate ids and their weights, reused across calls.
  std::vector<float> scratch_logits_;
  std::vector<int32_t> candidates_;
  std::vector<double> weights_;
};

// 0. The mask: every token whose bit in `allowed` is clear gets logit -infinity. In place.
void ApplyMask(absl::Span<float> logits, absl::Span<const uint8_t> allowed);

// 1. Penalties: the repetition penalty over prompt and generated tokens (each distinct token
// once: positive logits divided by it, negative ones multiplied), then the frequency and
// presence penalties over generated tokens. In place; ids outside [0, vocab) are ignored.
void ApplyPenalties(absl::Span<float> logits, const SamplingParams& params,
                    const TokenHistory& history);

// 2. Temperature: the TemperedLogits of the penalised logits; log_z only `with_log_z` (it
// takes a pass of exponentials over the vocabulary, needed only for log-probabilities).
TemperedLogits Temper(absl::Span<const float> logits, float temperature, bool with_log_z = true);

// 3. Top-k: writes to `candidates` the ids of the k highest logits in decreasing order (the
// lower id first on a tie); every id, in that order, when k is 0 (off) or >= vocab.
void TopK(absl::Span<const float> logits, int32_t k, std::vector<int32_t>* candidates);
// Every id in TopK's order (decreasing logit, the lower id first on a tie), by a linear-time
// radix sort; `scratch`: a buffer of the vocabulary's size, reused across calls.
void SortByLogitDesc(absl::Span<const float> logits, std::vector<int32_t>* ids,
                     std::vector<int32_t>* scratch);

// The candidates' unnormalised probabilities exp(logits[id] / t - max_scaled) (each at most 1)
// into `weights`, aligned with `candidates`; returns their sum.
double CandidateWeights(absl::Span<const float> logits, const TemperedLogits& tempered,
                        absl::Span<const int32_t> candidates, std::vector<double>* weights);

// 4. Top-p: how many of the leading `weights` (decreasing, summing to `total`) form the
// smallest prefix reaching top_p * total; all of them when top_p is 1 (off).
size_t TopP(absl::Span<const double> weights, double total, float top_p);

// 5. Min-p: how many of the first `keep` weights are at least min_p times the first (the
// largest), the first always staying; `keep` when min_p is 0 (off).
size_t MinP(absl::Span<const double> weights, size_t keep, float min_p);

// 6. Typical: reorders the first `keep` candidates (and their weights) by how far each one's
// surprise -log p lies from the entropy of those `keep` (closest first; ties keep the earlier
// one), and returns how many of them form the smallest prefix reaching typical_p of their
// mass (at least 1); `keep`, untouched, when typical_p is 1 (off).
size_t Typical(std::vector<int32_t>* candidates, std::vector<double>* weights, size_t keep,
               float typical_p);

// 7. Draw: the index i < keep at which uniform * sum(weights[0, keep)) falls in the cumulative
// weights; `uniform` in [0, 1) (PhiloxUniform of the seed and index). keep >= 1.
size_t Draw(absl::Span<const double> weights, size_t keep, double uniform);

// The n best tokens under `tempered` (n clamped to the vocabulary), best first, with their
// logprobs; `scratch` is reused for the ids.
std::vector<TokenLogprob> TopLogprobs(absl::Span<const float> logits,
                                      const TemperedLogits& tempered, uint32_t n,
                                      std::vector<int32_t>* scratch);

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_SAMPLER_H_
