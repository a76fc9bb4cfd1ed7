#include "server/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/arg_max.h"
#include "kernels/cpu/sum_exp.h"
#include "server/engine/philox.h"

namespace tpserve::engine {
namespace {

// Higher logit first; the lower id wins a tie, so the order is total and deterministic.
struct ByLogitDesc {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  }
};

bool InRange(float v, float lo, float hi) { return v >= lo && v <= hi; }

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p, int32_t vocab_size) {
  if (!(p.temperature >= 0.0f) || std::isinf(p.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be a finite number >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  if (!InRange(p.min_p, 0.0f, 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", p.min_p));
  }
  if (!(p.typical_p > 0.0f && p.typical_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("typical_p must be in (0, 1], got ", p.typical_p));
  }
  if (!InRange(p.repetition_penalty, kMinRepetitionPenalty, kMaxRepetitionPenalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be in [", kMinRepetitionPenalty, ", ",
                     kMaxRepetitionPenalty, "], got ", p.repetition_penalty));
  }
  if (!InRange(p.frequency_penalty, -2.0f, 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frequency_penalty must be in [-2, 2], got ", p.frequency_penalty));
  }
  if (!InRange(p.presence_penalty, -2.0f, 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("presence_penalty must be in [-2, 2], got ", p.presence_penalty));
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop_token_ids: ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

void ApplyPenalties(absl::Span<float> logits, const SamplingParams& p,
                    const TokenHistory& history) {
  const auto vocab = static_cast<int32_t>(logits.size());
  if (p.repetition_penalty != 1.0f) {
    absl::flat_hash_set<int32_t> seen;
    for (auto span : {history.prompt, history.generated}) {
      for (int32_t id : span) {
        if (id < 0 || id >= vocab || !seen.insert(id).second) continue;
        float& l = logits[id];
        l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
      }
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    absl::flat_hash_map<int32_t, int32_t> counts;
    for (int32_t id : history.generated) {
      if (id >= 0 && id < vocab) ++counts[id];
    }
    for (const auto& [id, count] : counts) {
      logits[id] -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
    }
  }
}

TemperedLogits Temper(absl::Span<const float> logits, float temperature, bool with_log_z) {
  const auto vocab = static_cast<int32_t>(logits.size());
  TemperedLogits tempered;
  tempered.temperature = temperature > 0.0f ? temperature : 1.0;
  const double t = tempered.temperature;
  const auto argmax = static_cast<int32_t>(kernels::cpu::ArgMax(logits.data(), vocab));
  tempered.argmax = argmax;
  tempered.max_scaled = logits[argmax] / t;
  if (!with_log_z) return tempered;
  const double sum = kernels::cpu::SumExp(logits.data(), vocab, static_cast<float>(1.0 / t),
                                          static_cast<float>(tempered.max_scaled));
  // The largest term is e^0 = 1; the float exponent of the others must not pull the sum, and so
  // the top token's log-probability, past that.
  tempered.log_z = tempered.max_scaled + std::log(std::max(1.0, sum));
  return tempered;
}

void SortByLogitDesc(absl::Span<const float> logits, std::vector<int32_t>* ids,
                     std::vector<int32_t>* scratch) {
  const auto vocab = static_cast<int32_t>(logits.size());
  // A key per token whose ascending order is the logits' descending order (-0 taken as +0, as
  // == compares them); a stable LSD radix sort over its two 16-bit halves, from ids in
  // ascending order, keeps ties in ascending id order: ByLogitDesc's order exactly, in two
  // linear passes instead of a comparison sort.
  std::vector<uint32_t> keys(static_cast<size_t>(vocab));
  for (int32_t id = 0; id < vocab; ++id) {
    const float logit = logits[id] + 0.0f;
    uint32_t bits;
    std::memcpy(&bits, &logit, sizeof(bits));
    keys[id] = (bits & 0x80000000u) != 0 ? bits : ~(bits | 0x80000000u);
  }
  ids->resize(vocab);
  scratch->resize(vocab);
  std::iota(scratch->begin(), scratch->end(), 0);
  std::vector<int32_t> counts(1 << 16);
  for (const int shift : {0, 16}) {
    std::fill(counts.begin(), counts.end(), 0);
    for (int32_t id = 0; id < vocab; ++id) ++counts[(keys[id] >> shift) & 0xFFFF];
    int32_t offset = 0;
    for (int32_t& c : counts) offset += std::exchange(c, offset);
    std::vector<int32_t>& out = shift == 0 ? *ids : *scratch;
    const std::vector<int32_t>& in = shift == 0 ? *scratch : *ids;
    for (int32_t id : in) out[counts[(keys[id] >> shift) & 0xFFFF]++] = id;
  }
  ids->swap(*scratch);
}

void TopK(absl::Span<const float> logits, int32_t k, std::vector<int32_t>* candidates) {
  const auto vocab = static_cast<int32_t>(logits.size());
  if (k > 0 && k < vocab) {
    candidates->resize(vocab);
    std::iota(candidates->begin(), candidates->end(), 0);
    std::partial_sort(candidates->begin(), candidates->begin() + k, candidates->end(),
                      ByLogitDesc{logits.data()});
    candidates->resize(k);
  } else {
    std::vector<int32_t> scratch;
    SortByLogitDesc(logits, candidates, &scratch);
  }
}

double CandidateWeights(absl::Span<const float> logits, const TemperedLogits& tempered,
                        absl::Span<const int32_t> candidates, std::vector<double>* weights) {
  weights->resize(candidates.size());
  double total = 0.0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    (*weights)[i] = std::exp(logits[candidates[i]] / tempered.temperature - tempered.max_scaled);
    total += (*weights)[i];
  }
  return total;
}

size_t TopP(absl::Span<const double> weights, double total, float top_p) {
  if (!(top_p < 1.0f)) return weights.size();
  double cumulative = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    cumulative += weights[i];
    if (cumulative >= top_p * total) return i + 1;
  }
  return weights.size();
}

size_t MinP(absl::Span<const double> weights, size_t keep, float min_p) {
  if (!(min_p > 0.0f)) return keep;
  const double floor = min_p * weights[0];
  size_t n = 1;
  while (n < keep && weights[n] >= floor) ++n;
  return n;
}

size_t Typical(std::vector<int32_t>* candidates, std::vector<double>* weights, size_t keep,
               float typical_p) {
  if (!(typical_p < 1.0f) || keep <= 1) return keep;
  double mass = 0.0;
  for (size_t i = 0; i < keep; ++i) mass += (*weights)[i];
  // Entropy H = -sum p log p of the kept distribution; each token's distance |-log p - H|.
  double entropy = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    const double p = (*weights)[i] / mass;
    if (p > 0.0) entropy -= p * std::log(p);
  }
  struct Kept {
    double distance;  // |-log p - H|
    int32_t id;
    double weight;
  };
  std::vector<Kept> order(keep);
  for (size_t i = 0; i < keep; ++i) {
    const double p = (*weights)[i] / mass;
    const double surprise = p > 0.0 ? -std::log(p) : std::numeric_limits<double>::infinity();
    order[i] = {std::fabs(surprise - entropy), (*candidates)[i], (*weights)[i]};
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const Kept& a, const Kept& b) { return a.distance < b.distance; });
  for (size_t i = 0; i < keep; ++i) {
    (*candidates)[i] = order[i].id;
    (*weights)[i] = order[i].weight;
  }
  double cumulative = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += (*weights)[i];
    if (cumulative >= typical_p * mass) return i + 1;
  }
  return keep;
}

size_t Draw(absl::Span<const double> weights, size_t keep, double uniform) {
  double kept_total = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_total += weights[i];
  const double u = uniform * kept_total;
  double cumulative = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += weights[i];
    if (u < cumulative) return i;
  }
  return keep - 1;
}

std::vector<TokenLogprob> TopLogprobs(absl::Span<const float> logits,
                                      const TemperedLogits& tempered, uint32_t n,
                                      std::vector<int32_t>* scratch) {
  const auto vocab = static_cast<int32_t>(logits.size());
  const int32_t count = std::min<int32_t>(static_cast<int32_t>(n), vocab);
  scratch->resize(vocab);
  std::iota(scratch->begin(), scratch->end(), 0);
  std::partial_sort(scratch->begin(), scratch->begin() + count, scratch->end(),
                    ByLogitDesc{logits.data()});
  std::vector<TokenLogprob> top;
  top.reserve(count);
  for (int32_t i = 0; i < count; ++i) {
    top.push_back({(*scratch)[i], tempered.Logprob(logits, (*scratch)[i])});
  }
  return top;
}

void ApplyMask(absl::Span<float> logits, absl::Span<const uint8_t> allowed) {
  const size_t n = std::min(logits.size(), allowed.size() * 8);
  for (size_t id = 0; id < n; ++id) {
    if (((allowed[id / 8] >> (id % 8)) & 1) == 0) {
      logits[id] = -std::numeric_limits<float>::infinity();
    }
  }
  for (size_t id = n; id < logits.size(); ++id) {
    logits[id] = -std::numeric_limits<float>::infinity();
  }
}

SampleResult Sampler::Sample(absl::Span<const float> logits, const SamplingParams& p,
                             const TokenHistory& history, uint64_t index,
                             absl::Span<const uint8_t> allowed) {
  // The logits are copied only when a mask or a penalty changes them.
  absl::Span<const float> penalised = logits;
  const bool penalties =
      p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  if (penalties || !allowed.empty()) {
    scratch_logits_.assign(logits.begin(), logits.end());
    if (!allowed.empty()) ApplyMask(absl::MakeSpan(scratch_logits_), allowed);
    if (penalties) ApplyPenalties(absl::MakeSpan(scratch_logits_), p, history);
    penalised = scratch_logits_;
  }
  // The normaliser, a pass of exponentials over the vocabulary, only for log-probabilities.
  const bool want_logprobs = p.logprobs > 0;
  const TemperedLogits tempered = Temper(penalised, p.temperature, want_logprobs);

  SampleResult result;
  result.token_id =
      p.temperature == 0.0f ? tempered.argmax : DrawTruncated(penalised, tempered, p, index);
  if (want_logprobs) {
    result.logprob = tempered.Logprob(penalised, result.token_id);
    result.top = TopLogprobs(penalised, tempered, p.logprobs, &candidates_);
    // Masked tokens are not alternatives (and -infinity has no JSON form).
    while (!result.top.empty() && std::isinf(result.top.back().logprob)) result.top.pop_back();
  }
  return result;
}

int32_t Sampler::DrawTruncated(absl::Span<const float> logits, const TemperedLogits& tempered,
                               const SamplingParams& p, uint64_t index) {
  TopK(logits, p.top_k, &candidates_);
  const double total = CandidateWeights(logits, tempered, candidates_, &weights_);
  size_t keep = MinP(weights_, TopP(weights_, total, p.top_p), p.min_p);
  keep = Typical(&candidates_, &weights_, keep, p.typical_p);
  return candidates_[Draw(weights_, keep, PhiloxUniform(p.seed, index))];
}

}  // namespace tpserve::engine
