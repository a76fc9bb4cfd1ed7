#include "server/coordinator/draft_model.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "server/common/status_macros.h"
#include "server/engine/sampler.h"
#include "server/protocol/step_codec.h"

namespace tpserve::coordinator {
namespace {

constexpr absl::Duration kMaxBackoff = absl::Seconds(60);

// The known tokens of `job`'s sequence, then its proposals so far.
int32_t TokenAt(const DraftJob& job, int64_t pos) {
  const int64_t known = job.seq->length();
  return pos < known ? job.seq->token_at(pos) : (*job.draft)[pos - known];
}

// Where a job's next draw comes from: after its last known token or proposal.
int64_t DrawAt(const DraftJob& job) {
  return job.seq->length() + static_cast<int64_t>(job.draft->size());
}

}  // namespace

absl::Status CheckSameVocabulary(const model::Tokenizer& target, const model::Tokenizer& draft) {
  if (target.vocab_size() != draft.vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat("--draft_model: its vocabulary has ",
                                                   draft.vocab_size(), " tokens, the target's ",
                                                   target.vocab_size()));
  }
  for (int32_t id = 0; id < target.vocab_size(); ++id) {
    if (target.TokenBytes(id) != draft.TokenBytes(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--draft_model: its vocabulary differs from the target's at token ", id,
                       ": '", absl::CHexEscape(std::string(draft.TokenBytes(id))), "' against '",
                       absl::CHexEscape(std::string(target.TokenBytes(id))), "'"));
    }
  }
  return absl::OkStatus();
}

DraftModel::DraftModel(std::unique_ptr<StepExecutor> executor, DraftModelOptions options)
    : executor_(std::move(executor)), options_(options), backoff_(options.restart_backoff) {}

absl::Status DraftModel::Start() {
  states_.clear();
  blocks_.reset();
  up_ = false;
  if (absl::Status started = executor_->Start(); !started.ok()) {
    retry_at_ = absl::Now() + backoff_;
    backoff_ = std::min(2 * backoff_, kMaxBackoff);
    return started;
  }
  blocks_ = std::make_unique<BlockManager>(executor_->kv_blocks(), executor_->kv_block_size());
  backoff_ = options_.restart_backoff;
  up_ = true;
  return absl::OkStatus();
}

void DraftModel::GoDown(const absl::Status& why) {
  LOG(WARNING) << "the draft model went down; speculation is off until it restarts: " << why;
  states_.clear();
  blocks_.reset();
  up_ = false;
  retry_at_ = absl::Now() + backoff_;
  backoff_ = std::min(2 * backoff_, kMaxBackoff);
}

void DraftModel::Forget(uint64_t seq_id) {
  auto it = states_.find(seq_id);
  if (it == states_.end()) return;
  if (blocks_ != nullptr) blocks_->Release(&it->second.table);
  states_.erase(it);
}

void DraftModel::Propose(absl::Span<const DraftJob> jobs) {
  last_wall_ = absl::ZeroDuration();
  last_proposed_ = 0;
  for (const DraftJob& job : jobs) job.draft->clear();
  if (!up_) {
    if (absl::Now() < retry_at_) return;
    if (absl::Status started = Start(); !started.ok()) {
      LOG(WARNING) << "the draft model did not restart: " << started;
      return;
    }
    LOG(INFO) << "the draft model is up again; speculation resumes";
  }
  const absl::Time start = absl::Now();
  if (absl::Status run = Run(jobs); !run.ok()) {
    GoDown(run);
    for (const DraftJob& job : jobs) job.draft->clear();
    return;
  }
  last_wall_ = absl::Now() - start;
  for (const DraftJob& job : jobs) last_proposed_ += static_cast<int64_t>(job.draft->size());
}

absl::Status DraftModel::Run(absl::Span<const DraftJob> jobs) {
  std::vector<Work> work;
  work.reserve(jobs.size());
  std::vector<int64_t> lengths;  // each work's proposals wanted
  for (const DraftJob& job : jobs) {
    const int64_t known = job.seq->length();
    int64_t length = job.length;
    if (options_.max_positions > 0) length = std::min(length, options_.max_positions - known + 1);
    if (length <= 0 || known < 1) continue;
    State& state = states_[job.seq->id];
    // The cache holds the sequence's tokens up to `known`, then proposals: those the target
    // accepted are its tokens now, and the first that differs ends what can be kept.
    auto keep = std::min<int64_t>(state.known, known);
    while (keep < static_cast<int64_t>(state.tokens.size()) && keep < known &&
           state.tokens[keep] == job.seq->token_at(keep)) {
      ++keep;
    }
    state.tokens.resize(keep);
    // Proposals 1..length-1 are computed at positions known..known+length-2.
    if (!blocks_->GrowTo(known + length - 1, &state.table)) {
      blocks_->Release(&state.table);  // the cache is full: it does not draft, nor hold blocks
      states_.erase(job.seq->id);
      continue;
    }
    state.known = known;
    work.push_back({.job = &job, .state = &state, .next = keep});
    lengths.push_back(length);
  }
  // Every step spends the token budget on the first works that still draw; each step moves
  // one at least, so this ends.
  std::vector<Work*> batch;
  std::vector<int64_t> until;
  for (;;) {
    batch.clear();
    until.clear();
    int64_t budget = options_.max_batch_tokens;
    for (size_t i = 0; i < work.size() && budget > 0; ++i) {
      Work& w = work[i];
      if (static_cast<int64_t>(w.job->draft->size()) >= lengths[i]) continue;
      const int64_t end = std::min(DrawAt(*w.job), w.next + budget);
      batch.push_back(&w);
      until.push_back(end);
      budget -= end - w.next;
    }
    if (batch.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(RunStep(batch, until));
  }
}

absl::Status DraftModel::RunStep(absl::Span<Work* const> work, absl::Span<const int64_t> until) {
  tpserve::v1::Step step;
  step.set_step_id(next_step_id_++);
  engine::SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < work.size(); ++i) {
    const Work& w = *work[i];
    tokens.clear();
    for (int64_t pos = w.next; pos < until[i]; ++pos) tokens.push_back(TokenAt(*w.job, pos));
    protocol::AddStepSequence({.seq_id = w.job->seq->id,
                               .tokens = tokens,
                               .start_pos = w.next,
                               .block_table = w.state->table,
                               .sample = until[i] == DrawAt(*w.job),
                               .sample_index = w.job->seq->generated.size() + w.job->draft->size()},
                              greedy, {}, &step);
  }
  ASSIGN_OR_RETURN(StepOutcome outcome, executor_->RunStep(step));
  ++steps_;
  absl::flat_hash_map<uint64_t, int32_t> draws;
  for (const auto& sampled : outcome.result.tokens()) draws[sampled.seq_id()] = sampled.token_id();
  for (size_t i = 0; i < work.size(); ++i) {
    Work& w = *work[i];
    const bool draws_now = until[i] == DrawAt(*w.job);
    for (int64_t pos = w.next; pos < until[i]; ++pos) {
      w.state->tokens.push_back(TokenAt(*w.job, pos));
    }
    w.next = until[i];
    if (!draws_now) continue;
    auto drawn = draws.find(w.job->seq->id);
    if (drawn == draws.end()) {
      return absl::InternalError(absl::StrCat("draft step ", step.step_id(),
                                              " drew no token for sequence ", w.job->seq->id));
    }
    w.job->draft->push_back(drawn->second);
  }
  return absl::OkStatus();
}

}  // namespace tpserve::coordinator
