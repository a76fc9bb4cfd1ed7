// Speculator: speculative decoding's policy on the coordinator — for each decoding sequence,
// whether to propose tokens for the next step and how many (DraftLength), and in ngram mode
// which (ProposeNgram; draft mode: DraftModel). Verification on rank 0 keeps the tokens exactly
// those of plain decoding (engine::VerifyDraft), so this decides only speed:
//   - per sequence, the chance alpha that a proposed position is accepted, given the one
//     before it was: an exponentially weighted share of its tried positions that were kept;
//   - per step, a sequence proposes k tokens, the most (up to max_draft) whose last is still
//     expected to gain more than it costs: alpha^k tokens, at a decode token's share of a
//     plain step of the batch, against what one more position adds to the step (its
//     StepCostModel, learned from the steps' wall times, at the batch plus the positions
//     the sequences before it proposed), plus in draft mode what the draft model took per
//     proposal (an average of its calls). So speculation fades as the batch grows and extra
//     positions cost real compute, and grows as soon as proposals are kept; no position less
//     likely than 1 in 10 to be kept is proposed;
//   - a sequence that stopped drafting tries one proposal again every kProbeEvery steps, or
//     at a batch of N so large that not even a proposal sure to be kept would pay, every
//     kProbeEvery x N steps (one probe per kProbeEvery steps across the batch, so that the
//     cost model keeps seeing verification steps and can change its mind).
// Owned by the engine thread; not thread-safe.
#ifndef TPSERVE_SERVER_COORDINATOR_SPECULATOR_H_
#define TPSERVE_SERVER_COORDINATOR_SPECULATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/coordinator/ngram_proposer.h"
#include "server/coordinator/sequence.h"
#include "server/coordinator/step_cost_model.h"

namespace tpserve::coordinator {

enum class SpeculativeMode { kOff, kNgram, kDraft };

struct SpeculativeOptions {
  SpeculativeMode mode = SpeculativeMode::kOff;
  int max_draft = 4;  // --num_speculative_tokens: the most proposed per step, [1, 16]
  NgramOptions ngram;
  std::string draft_model;  // --draft_model: the draft's GGUF (draft mode)
};

// --speculative's value: "off", "ngram" or "draft"; InvalidArgument naming the flag otherwise.
absl::StatusOr<SpeculativeMode> ParseSpeculativeMode(const std::string& text);
// InvalidArgument naming --num_speculative_tokens when max_draft is outside [1, 16], and
// --draft_model when it is missing in draft mode or given in another.
absl::Status ValidateSpeculativeOptions(const SpeculativeOptions& options);

class Speculator {
 public:
  static constexpr int kProbeEvery = 16;

  explicit Speculator(SpeculativeOptions options);

  bool enabled() const { return options_.mode != SpeculativeMode::kOff; }

  // A new round of proposals, for the next step: the positions proposed count from 0.
  void BeginRound() { proposed_ = 0; }
  // How many tokens `seq` (decoding: every known token but its last is computed) is to
  // propose for a step of `batch` decoding sequences, at most `limit` (what its max_tokens
  // leaves); 0: none (a plain decode step). Counts them as proposed in this round.
  int64_t DraftLength(const Sequence& seq, int64_t batch, int64_t limit);
  // Ngram mode: DraftLength's proposals, into `draft` (cleared; empty: a plain decode step).
  void Propose(const Sequence& seq, int64_t batch, int64_t limit, std::vector<int32_t>* draft);
  // `seq_id` proposed `proposed` tokens in a step and `accepted` of them were accepted.
  void Record(uint64_t seq_id, int64_t proposed, int64_t accepted);
  // The sequence is gone.
  void Forget(uint64_t seq_id) { states_.erase(seq_id); }
  // A step of `tokens` positions took `wall`: the cost model's evidence.
  void ObserveStep(int64_t tokens, absl::Duration wall) { cost_.Observe(tokens, wall); }
  // Draft mode: the draft model took `wall` to propose `proposed` tokens.
  void ObserveDraft(int64_t proposed, absl::Duration wall);

  // For tests and the log.
  const StepCostModel& cost_model() const { return cost_; }
  double draft_cost() const { return draft_cost_; }  // seconds per proposal (draft mode)

 private:
  struct State {
    // Exponentially weighted counts of proposed positions tried (every accepted one, and the
    // first rejected) and kept; a new sequence starts from 3 kept of 4 tried, since an
    // ngram proposal is made only where the text already repeats itself.
    double kept = 3.0;
    double tried = 4.0;
    int idle = 0;  // steps since it last drafted
    double acceptance() const { return tried > 0 ? kept / tried : 0.0; }
  };

  const SpeculativeOptions options_;
  absl::flat_hash_map<uint64_t, State> states_;
  StepCostModel cost_;
  int64_t proposed_ = 0;   // positions proposed in this round (BeginRound)
  double draft_cost_ = 0;  // exponential average of the draft's seconds per proposal
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_SPECULATOR_H_
