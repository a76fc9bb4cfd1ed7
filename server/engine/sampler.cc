#include "server/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
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
  if (!(p.repetition_penalty > 0.0f) || std::isinf(p.repetition_penalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be a finite number > 0, got ", p.repetition_penalty));
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

SampleResult Sampler::Sample(absl::Span<const float> logits, const SamplingParams& p,
                             const TokenHistory& history, uint64_t index) {
  const auto vocab = static_cast<int32_t>(logits.size());
  scratch_logits_.assign(logits.begin(), logits.end());
  ApplyPenalties(absl::MakeSpan(scratch_logits_), p, history);
  const float* l = scratch_logits_.data();

  // The reported distribution: softmax(l / t) over the whole vocabulary (t = 1 if greedy).
  const double t = p.temperature > 0.0f ? p.temperature : 1.0;
  int32_t argmax = 0;
  for (int32_t i = 1; i < vocab; ++i) {
    if (l[i] > l[argmax]) argmax = i;
  }
  const double max_scaled = l[argmax] / t;
  double sum = 0.0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(l[i] / t - max_scaled);
  const double log_z = max_scaled + std::log(sum);
  auto logprob_of = [&](int32_t id) { return static_cast<float>(l[id] / t - log_z); };

  SampleResult result;
  if (p.temperature == 0.0f) {
    result.token_id = argmax;
  } else {
    candidates_.resize(vocab);
    for (int32_t i = 0; i < vocab; ++i) candidates_[i] = i;
    const ByLogitDesc order{l};
    if (p.top_k > 0 && p.top_k < vocab) {
      std::partial_sort(candidates_.begin(), candidates_.begin() + p.top_k, candidates_.end(),
                        order);
      candidates_.resize(p.top_k);
    } else {
      std::sort(candidates_.begin(), candidates_.end(), order);
    }
    // probs_[i]: unnormalised probability of candidates_[i], in decreasing order.
    probs_.resize(candidates_.size());
    double total = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      probs_[i] = std::exp(l[candidates_[i]] / t - max_scaled);
      total += probs_[i];
    }
    size_t keep = candidates_.size();
    if (p.top_p < 1.0f) {
      double cumulative = 0.0;
      for (size_t i = 0; i < keep; ++i) {
        cumulative += probs_[i];
        if (cumulative >= p.top_p * total) {
          keep = i + 1;
          break;
        }
      }
    }
    if (p.min_p > 0.0f) {
      const double floor = p.min_p * probs_[0];
      size_t n = 1;
      while (n < keep && probs_[n] >= floor) ++n;
      keep = n;
    }
    double kept_total = 0.0;
    for (size_t i = 0; i < keep; ++i) kept_total += probs_[i];
    const double u = PhiloxUniform(p.seed, index) * kept_total;
    size_t chosen = keep - 1;
    double cumulative = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += probs_[i];
      if (u < cumulative) {
        chosen = i;
        break;
      }
    }
    result.token_id = candidates_[chosen];
  }
  result.logprob = logprob_of(result.token_id);

  if (p.logprobs > 0) {
    const int32_t n = std::min<int32_t>(static_cast<int32_t>(p.logprobs), vocab);
    candidates_.resize(vocab);
    for (int32_t i = 0; i < vocab; ++i) candidates_[i] = i;
    std::partial_sort(candidates_.begin(), candidates_.begin() + n, candidates_.end(),
                      ByLogitDesc{l});
    for (int32_t i = 0; i < n; ++i) {
      result.top.push_back({candidates_[i], logprob_of(candidates_[i])});
    }
  }
  result.is_stop = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), result.token_id) !=
                   p.stop_token_ids.end();
  return result;
}

}  // namespace tpserve::engine
