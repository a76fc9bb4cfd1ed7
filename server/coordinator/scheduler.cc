#include "server/coordinator/scheduler.h"

#include <algorithm>

#include "glog/logging.h"

namespace tpserve::coordinator {

Scheduler::Scheduler(SchedulerOptions options, BlockManager* blocks)
    : options_(options), blocks_(blocks) {
  CHECK_GT(options_.max_batch_tokens, 0);
  CHECK_GT(options_.max_running, 0);
}

void Scheduler::Enqueue(Sequence* seq) {
  CHECK_EQ(seq->computed, 0);
  CHECK(seq->block_table.empty());
  waiting_.push_back(seq);
}

void Scheduler::Remove(Sequence* seq) {
  for (std::deque<Sequence*>* q : {&running_, &waiting_}) {
    auto it = std::find(q->begin(), q->end(), seq);
    if (it != q->end()) q->erase(it);
  }
  blocks_->Release(&seq->block_table);
  seq->block_keys.clear();
  seq->computed = 0;
}

void Scheduler::Preempt(Sequence* seq) {
  blocks_->Release(&seq->block_table);
  seq->block_keys.clear();
  seq->computed = 0;
  ++seq->preemptions;
  waiting_.push_front(seq);
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  int64_t budget = options_.max_batch_tokens;
  // Running sequences, oldest first. Victims for preemption come from the back, which holds
  // the sequences not yet planned in this step.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t count = std::min(seq->length() - seq->computed, budget);
    CHECK_GT(count, 0) << "running sequence " << seq->id << " has nothing to compute";
    bool fits = blocks_->GrowTo(seq->computed + count, &seq->block_table);
    while (!fits && running_.back() != seq) {
      Sequence* victim = running_.back();
      running_.pop_back();
      Preempt(victim);
      plan.preempted.push_back(victim);
      fits = blocks_->GrowTo(seq->computed + count, &seq->block_table);
    }
    if (!fits) {  // only older (planned) sequences hold blocks: this one waits its turn
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      Preempt(seq);
      plan.preempted.push_back(seq);
      break;
    }
    plan.entries.push_back({seq, seq->computed, count, seq->computed + count == seq->length()});
    budget -= count;
    ++i;
  }
  // Admission: only when nothing had to be preempted, so that a freed block is not refilled
  // by a newcomer while an older sequence waits for it.
  while (plan.preempted.empty() && budget > 0 && !waiting_.empty() &&
         static_cast<int64_t>(running_.size()) < options_.max_running) {
    Sequence* seq = waiting_.front();
    // The last position is always computed: its logits give the next token.
    const int64_t cached = blocks_->MatchPrefix(seq, seq->length() - 1);
    const int64_t count = std::min(seq->length() - cached, budget);
    if (!blocks_->GrowTo(cached + count, &seq->block_table)) {
      blocks_->Release(&seq->block_table);  // FCFS: the head waits, so all do
      seq->block_keys.clear();
      break;
    }
    waiting_.pop_front();
    running_.push_back(seq);
    seq->computed = cached;
    plan.entries.push_back({seq, cached, count, cached + count == seq->length()});
    plan.prefix_queried += seq->length() - 1;
    plan.prefix_hits += cached;
    budget -= count;
  }
  // Drafts last, from what is left: they never take a token, a row or a block that a plain
  // step or an admission would, and never preempt anyone.
  int64_t spare_rows = options_.max_logit_rows;
  for (const PlannedSequence& e : plan.entries) spare_rows -= e.sample ? 1 : 0;
  for (PlannedSequence& e : plan.entries) {
    Sequence* seq = e.seq;
    if (!e.sample || e.count != 1 || seq->draft.empty()) continue;
    int64_t draft = std::min({static_cast<int64_t>(seq->draft.size()), budget, spare_rows});
    while (draft > 0 && !blocks_->GrowTo(e.start + 1 + draft, &seq->block_table)) --draft;
    e.count += draft;
    e.draft = draft;
    budget -= draft;
    spare_rows -= draft;
    plan.draft_tokens += draft;
  }
  plan.tokens = options_.max_batch_tokens - budget;
  return plan;
}

void Scheduler::Commit(const StepPlan& plan) {
  for (const PlannedSequence& e : plan.entries) {
    CHECK_EQ(e.seq->computed, e.start) << "sequence " << e.seq->id << " changed under its step";
    e.seq->computed += e.count - e.draft;
    blocks_->Register(e.seq);
  }
}

void Scheduler::Accept(Sequence* seq, int64_t accepted) {
  CHECK_LE(seq->computed + accepted, seq->length()) << "sequence " << seq->id;
  seq->computed += accepted;
  blocks_->Register(seq);
}

void Scheduler::PreemptAll() {
  while (!running_.empty()) {  // back to front, so the oldest ends at the head of the queue
    Sequence* seq = running_.back();
    running_.pop_back();
    Preempt(seq);
  }
}

}  // namespace tpserve::coordinator
