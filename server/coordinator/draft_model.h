// DraftModel: speculative decoding's draft mode (--speculative draft) — a smaller model with
// the target's vocabulary that proposes tokens greedily. It runs in the coordinator's process,
// as a world of one rank of its own (a StepExecutor over --draft_model: the model in process),
// with a KV cache of its own that this class maps with its own BlockManager. So where and how
// wide the target runs (TP=1..N, any host) does not matter to it.
//
// Per call, for the sequences that draft this step (their lengths from the Speculator):
//   1. each sequence's draft cache is brought up to its known tokens: what the cache held
//      past the tokens the target kept (rejected proposals) is dropped, and the rest is
//      computed in chunks of at most max_batch_tokens, the last chunk drawing the first
//      proposal (argmax);
//   2. then one step per further proposal, every sequence still drafting together: its last
//      proposal in, the next one drawn.
// The draft never fails a request: an error of its world turns speculation off (no proposals)
// and the world is started again after a backoff, doubling to a minute, with every draft
// cache rebuilt from the tokens. A sequence that finds no KV blocks left does not draft.
// Owned by the engine thread; not thread-safe.
#ifndef TPSERVE_SERVER_COORDINATOR_DRAFT_MODEL_H_
#define TPSERVE_SERVER_COORDINATOR_DRAFT_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/coordinator/block_manager.h"
#include "server/coordinator/sequence.h"
#include "server/coordinator/step_executor.h"
#include "server/model/tokenizer/tokenizer.h"

namespace tpserve::coordinator {

// OK when `draft` has `target`'s vocabulary: the same size and the same bytes for every id;
// InvalidArgument naming --draft_model and the first id that differs otherwise.
absl::Status CheckSameVocabulary(const model::Tokenizer& target, const model::Tokenizer& draft);

struct DraftModelOptions {
  int64_t max_batch_tokens = 256;                     // positions per draft step
  int64_t max_positions = 0;                          // the draft's context; 0: unbounded
  absl::Duration restart_backoff = absl::Seconds(1);  // first wait before restarting it
};

// One sequence's share of a call: it proposes up to `length` tokens into `draft`.
struct DraftJob {
  const Sequence* seq = nullptr;  // decoding: every known token but its last is computed
  int64_t length = 0;
  std::vector<int32_t>* draft = nullptr;  // cleared, then filled (empty: no proposal)
};

class DraftModel {
 public:
  explicit DraftModel(std::unique_ptr<StepExecutor> executor, DraftModelOptions options = {});

  // Brings the draft's world up (the model loads); the error says why it did not. The server
  // calls it once at start and refuses to serve when it fails; later restarts are Propose's.
  absl::Status Start();
  bool up() const { return up_; }

  // Fills every job's draft (see the file comment). Drafts stay empty while the world is down.
  void Propose(absl::Span<const DraftJob> jobs);
  // The sequence is gone: its draft cache is given back.
  void Forget(uint64_t seq_id);

  // What the last Propose took, all its draft steps together, and the tokens it proposed.
  absl::Duration last_wall() const { return last_wall_; }
  int64_t last_proposed() const { return last_proposed_; }
  int64_t steps() const { return steps_; }  // draft steps run since the start
  int64_t free_blocks() const { return blocks_ != nullptr ? blocks_->free_blocks() : 0; }
  int64_t total_blocks() const { return blocks_ != nullptr ? blocks_->total_blocks() : 0; }

 private:
  struct State {
    std::vector<int32_t> tokens;  // what the draft's cache holds, position by position
    int64_t known = 0;            // of them, the sequence's own tokens when they were drafted
    std::vector<int32_t> table;   // its KV blocks
  };
  struct Work {
    const DraftJob* job;
    State* state;
    int64_t next = 0;  // first position not yet computed in this call
  };

  // Runs the jobs; an error means the draft's world is down.
  absl::Status Run(absl::Span<const DraftJob> jobs);
  // One draft step over `work`: each entry computes positions [next, until) of its sequence's
  // known tokens then proposals, and draws its next proposal when that reaches their end.
  absl::Status RunStep(absl::Span<Work* const> work, absl::Span<const int64_t> until);
  void GoDown(const absl::Status& why);

  std::unique_ptr<StepExecutor> executor_;
  const DraftModelOptions options_;
  std::unique_ptr<BlockManager> blocks_;         // the draft cache's map; null while down
  absl::node_hash_map<uint64_t, State> states_;  // node: Work points into it
  bool up_ = false;
  absl::Time retry_at_;
  absl::Duration backoff_;
  uint64_t next_step_id_ = 1;
  absl::Duration last_wall_;
  int64_t last_proposed_ = 0;
  int64_t steps_ = 0;
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_DRAFT_MODEL_H_
