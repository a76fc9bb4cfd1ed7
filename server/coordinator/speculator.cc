#include "server/coordinator/speculator.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve::coordinator {
namespace {

// Each step's weight in the averages against the ones before it.
constexpr double kAcceptanceDecay = 0.7;  // of a sequence's acceptance history
// A proposal must be expected to gain this much more than it costs.
constexpr double kMargin = 1.25;
// Nor is a position proposed that is less likely than this to be kept, whatever the cost
// model says (it knows nothing yet, or the positions look free).
constexpr double kMinChance = 0.1;

}  // namespace

absl::StatusOr<SpeculativeMode> ParseSpeculativeMode(const std::string& text) {
  if (text == "off") return SpeculativeMode::kOff;
  if (text == "ngram") return SpeculativeMode::kNgram;
  if (text == "draft") return SpeculativeMode::kDraft;
  return absl::InvalidArgumentError(
      absl::StrCat("--speculative: '", text, "' is not one of off, ngram, draft"));
}

absl::Status ValidateSpeculativeOptions(const SpeculativeOptions& options) {
  if (options.max_draft < 1 || options.max_draft > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_speculative_tokens: ", options.max_draft, " is outside [1, 16]"));
  }
  const bool draft = options.mode == SpeculativeMode::kDraft;
  if (draft && options.draft_model.empty()) {
    return absl::InvalidArgumentError("--draft_model: --speculative draft needs a draft model");
  }
  if (!draft && !options.draft_model.empty()) {
    return absl::InvalidArgumentError(
        "--draft_model: given without --speculative draft, which alone uses it");
  }
  return absl::OkStatus();
}

Speculator::Speculator(SpeculativeOptions options) : options_(std::move(options)) {}

void Speculator::ObserveDraft(int64_t proposed, absl::Duration wall) {
  if (proposed <= 0) return;
  const double per = absl::ToDoubleSeconds(wall) / static_cast<double>(proposed);
  draft_cost_ =
      draft_cost_ <= 0 ? per : kAcceptanceDecay * draft_cost_ + (1 - kAcceptanceDecay) * per;
}

int64_t Speculator::DraftLength(const Sequence& seq, int64_t batch, int64_t limit) {
  if (!enabled() || limit <= 0) return 0;
  State& state = states_[seq.id];
  // The k-th proposal is accepted with probability alpha^k (each after the one before), for
  // an expected gain of alpha^k x a decode token's share of a plain step, against what its
  // position adds to the step (+ the draft's time per proposal): propose while the next one
  // gains kMargin times what it costs.
  const auto n = static_cast<double>(std::max<int64_t>(1, batch));
  const double per_token = cost_.Seconds(n) / n;
  const double at = n + static_cast<double>(proposed_);  // the step as proposed so far
  // Where not even a proposal sure to be kept would pay (a large batch), probes are rarer: one
  // position per kProbeEvery steps across the batch, enough to keep the cost model current.
  const bool sure_pays =
      !cost_.Known() || per_token >= kMargin * (cost_.Added(at, 1.0) + draft_cost_);
  const double alpha = state.acceptance();
  const int64_t most = std::min<int64_t>(options_.max_draft, limit);
  int64_t k = 0;
  double chance = alpha;  // that the next proposal is kept: every earlier one was, too
  while (k < most && chance >= kMinChance) {
    const double cost = cost_.Added(at + static_cast<double>(k), 1.0) + draft_cost_;
    if (cost_.Known() && chance * per_token < kMargin * cost) break;
    ++k;
    chance *= alpha;
  }
  if (k == 0) {
    if (++state.idle < (sure_pays ? kProbeEvery : kProbeEvery * std::max<int64_t>(1, batch))) {
      return 0;
    }
    k = 1;  // probe: has the text turned repetitive, or the draft a better guess?
  }
  proposed_ += k;
  return k;
}

void Speculator::Propose(const Sequence& seq, int64_t batch, int64_t limit,
                         std::vector<int32_t>* draft) {
  draft->clear();
  const int64_t k = DraftLength(seq, batch, limit);
  if (k > 0) ProposeNgram(seq.prompt, seq.generated, options_.ngram, k, draft);
  proposed_ -= k - static_cast<int64_t>(draft->size());  // no match: nothing proposed
  if (!draft->empty()) states_[seq.id].idle = 0;
}

void Speculator::Record(uint64_t seq_id, int64_t proposed, int64_t accepted) {
  if (proposed <= 0) return;
  State& state = states_[seq_id];
  state.idle = 0;  // it drafted (a draft model's proposals are known only here)
  // `accepted` positions were tried and kept; the next, if any was proposed, was tried and lost.
  state.kept = kAcceptanceDecay * state.kept + static_cast<double>(accepted);
  state.tried = kAcceptanceDecay * state.tried + static_cast<double>(accepted) +
                (accepted < proposed ? 1.0 : 0.0);
}

}  // namespace tpserve::coordinator
