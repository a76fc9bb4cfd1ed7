// Scheduler: iteration-level continuous batching over the paged KV cache. Each call to
// Schedule() plans one worker step under a token budget: first every running sequence in
// admission order (a decode token, or the next chunk of a prefill or a recompute), then
// waiting sequences admitted first-come first-served while the budget, the running limit and
// the free KV blocks allow. When a running sequence cannot grow, the most recently admitted
// running sequence is preempted (its blocks freed, to be recomputed from its token history)
// and goes back to the head of the queue. With prefix caching, an admitted sequence first
// shares the cached blocks of its longest cached prefix and is computed from there; the
// blocks each step fills are cached at Commit. As long as every sequence fits the cache alone
// (the coordinator caps prompt + max_tokens at the capacity), the oldest running sequence
// always progresses: no deadlock. Speculative decoding: a decoding sequence with a draft
// runs its last token and as much of the draft as the token budget, the logit rows and the
// free blocks allow (a draft never preempts anyone); Commit counts only its last token as
// cached, and Accept the proposals verification kept (the rest of the positions are written
// over later: they are past `computed`, in blocks the sequence alone holds).
//
// The scheduler does not own the sequences (the engine does) and never reads their outputs.
// Not thread-safe: owned by the engine thread.
#ifndef TPSERVE_SERVER_COORDINATOR_SCHEDULER_H_
#define TPSERVE_SERVER_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "server/coordinator/block_manager.h"
#include "server/coordinator/sequence.h"

namespace tpserve::coordinator {

struct SchedulerOptions {
  int64_t max_batch_tokens = 512;  // tokens computed per step, all sequences together
  int64_t max_running = 64;        // sequences in the running batch
  // Logit rows per step, all sequences together: the workers' EngineOptions::max_logit_rows.
  // A plain step takes one per sampling sequence; a draft one per proposal more.
  int64_t max_logit_rows = 256;
};

// One sequence's share of a step: positions [start, start + count) of prompt + generated.
struct PlannedSequence {
  Sequence* seq = nullptr;
  int64_t start = 0;
  int64_t count = 0;
  bool sample = false;  // the step completes the sequence's known tokens: sample the next
  int64_t draft = 0;    // the last `draft` of the positions are proposals (seq->draft's first)
};

struct StepPlan {
  std::vector<PlannedSequence> entries;  // running ones first, then newly admitted
  std::vector<Sequence*> preempted;      // sent back to the queue by this plan
  int64_t tokens = 0;                    // sum of the counts
  int64_t draft_tokens = 0;              // sum of the drafts
  // Prefix caching, over the sequences admitted by this plan: the positions looked up in the
  // cache (each one's length less one: the last is always computed) and those found there.
  int64_t prefix_queried = 0;
  int64_t prefix_hits = 0;
  bool empty() const { return entries.empty(); }
};

class Scheduler {
 public:
  // `blocks` must outlive the scheduler.
  Scheduler(SchedulerOptions options, BlockManager* blocks);

  // Queues a new sequence (computed == 0, no blocks) behind the waiting ones.
  void Enqueue(Sequence* seq);
  // Takes `seq` out of the queue or the batch and frees its blocks. No-op if unknown.
  void Remove(Sequence* seq);
  // Plans the next step and allocates the blocks it writes. The plan's sequences stay valid
  // until the next Schedule() or Remove().
  StepPlan Schedule();
  // The step of `plan` ran: its positions are now cached, but for the drafts.
  void Commit(const StepPlan& plan);
  // After Commit: `accepted` of seq's planned proposals were kept (and have joined
  // seq->generated): their positions are cached too.
  void Accept(Sequence* seq, int64_t accepted);
  // The workers lost their KV cache (world down): every running sequence goes back to the
  // head of the queue, in admission order, to be recomputed.
  void PreemptAll();

  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }

 private:
  void Preempt(Sequence* seq);

  const SchedulerOptions options_;
  BlockManager* const blocks_;
  std::deque<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;  // FCFS; preempted sequences at the front
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_SCHEDULER_H_
