#include "server/coordinator/batch_engine.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "server/common/catch_all.h"
#include "server/coordinator/finish_rule.h"
#include "server/coordinator/sequence.h"
#include "server/coordinator/text_streamer.h"
#include "server/grammar/token_constraint.h"
#include "server/model/tokenizer/utf8.h"
#include "server/protocol/step_codec.h"

namespace tpserve::coordinator {

using tpserve::v1::FinishReason;
using tpserve::v1::GenerateResponse;

struct BatchEngine::Request {
  RequestSpec spec;
  std::shared_ptr<ResponseSink> sink;
  Sequence seq;
  std::unique_ptr<TextStreamer> streamer;
  absl::Time arrival;                            // Submit
  bool admitted = false;                         // has been in a step
  absl::Time last_token = absl::InfinitePast();  // when the previous token was delivered
  int failed_steps = 0;                          // steps of it that took the world down
  bool sent = false;                             // a message has gone to its sink
  // Its structured-output state (null for free text), and why its last mask failed (its
  // token is then dropped and the request ended with that error).
  std::unique_ptr<grammar::TokenConstraint> constraint;
  absl::Status mask_failed;
  // Speculative decoding: tokens proposed for it, and those accepted so far.
  int64_t spec_proposed = 0;
  int64_t spec_accepted = 0;
};

namespace {

// The first wait before retrying a world that did not start (then doubled, up to
// BatchEngineOptions::restart_backoff).
constexpr absl::Duration kFirstRestartBackoff = absl::Milliseconds(50);

// SplitMix64: spreads the seeds drawn for requests that set none.
uint64_t MixSeed(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

BatchEngine::BatchEngine(const BatchEngineOptions& options, StepExecutor* executor,
                         const model::Tokenizer& tokenizer, ServingMetrics* metrics,
                         std::function<void(bool)> on_ready)
    : options_(options),
      executor_(executor),
      tokenizer_(tokenizer),
      metrics_(metrics),
      on_ready_(std::move(on_ready)),
      speculator_(options.speculative),
      seed_state_(absl::Uniform<uint64_t>(absl::BitGen())) {}

BatchEngine::~BatchEngine() { Stop(); }

void BatchEngine::Start() {
  CHECK(!loop_.joinable()) << "BatchEngine started twice";
  down_since_ = absl::Now();
  loop_ = std::thread([this] { Loop(); });
}

absl::Status BatchEngine::Submit(RequestSpec spec, std::shared_ptr<ResponseSink> sink) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || draining_) {
    return absl::UnavailableError("the server is draining and takes no new requests");
  }
  if (!stats_.ready) return absl::UnavailableError("the worker world is not ready");
  const int64_t waiting = static_cast<int64_t>(inbox_.size()) + stats_.waiting;
  if (waiting >= options_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the queue is full: ", waiting, " requests waiting (max_queue ", options_.max_queue, ")"));
  }
  // A request must fit the KV cache alone, or the scheduler could never finish it.
  const int64_t capacity = stats_.kv_blocks_total * stats_.kv_block_size;
  const int64_t total = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens;
  if (total > capacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: prompt (", spec.prompt.size(), " tokens) + max_tokens (",
                     spec.max_tokens, ") exceeds the KV cache capacity of ", capacity, " tokens"));
  }
  // Admission names the request and draws its seed, whichever front end it came through.
  if (spec.request_id.empty()) spec.request_id = absl::StrCat("req-", next_request_number_++);
  seed_state_ = MixSeed(seed_state_);
  spec.sampling.seed = spec.seed.value_or(seed_state_);
  VLOG(1) << "admitted " << spec.request_id;
  auto request = std::make_unique<Request>();
  request->spec = std::move(spec);
  request->sink = std::move(sink);
  request->arrival = absl::Now();
  inbox_.push_back(std::move(request));
  ++in_flight_;
  return absl::OkStatus();
}

void BatchEngine::Drain() {
  bool was_ready = false;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    was_ready = stats_.ready;
    stats_.ready = false;
  }
  if (was_ready && on_ready_) on_ready_(false);
}

absl::Status BatchEngine::AwaitReady(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stats_.ready || stopping_ || draining_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&settled), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the world was not ready after ", absl::FormatDuration(timeout)));
  }
  if (stats_.ready) return absl::OkStatus();
  if (!fatal_.ok()) return fatal_;
  return absl::UnavailableError("the engine is stopped or draining");
}

bool BatchEngine::AwaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](int64_t* n) { return *n == 0; }, &in_flight_),
                              timeout);
}

void BatchEngine::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (loop_.joinable()) loop_.join();
}

absl::Status BatchEngine::fatal() const {
  absl::MutexLock lock(&mu_);
  return fatal_;
}

EngineStats BatchEngine::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void BatchEngine::SetReady(bool ready) {
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    ready = ready && !draining_ && !stopping_;
    changed = stats_.ready != ready;
    stats_.ready = ready;
  }
  if (changed && on_ready_) on_ready_(ready);
}

void BatchEngine::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    // A turn that throws (a bug, a failed allocation) fails the requests in flight, whose
    // state it may have left half-updated, and rebuilds the world; the server serves on.
    const absl::Status turn = CatchAll("the batch loop", [this] { Turn(); });
    if (!turn.ok()) {
      FailAll(turn);
      WorldDown(turn);
    }
  }
  FailAll(absl::UnavailableError("the server is shutting down"));
  SetReady(false);
  Publish();
}

void BatchEngine::Turn() {
  if (!world_up_ && !RecoverWorld()) {
    ReapCancelled();
    // A restarted worker is usually back within a fraction of a second: retry soon, then
    // less often, up to restart_backoff.
    backoff_ = std::min(std::max(2 * backoff_, kFirstRestartBackoff), options_.restart_backoff);
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff_);
    return;
  }
  backoff_ = absl::ZeroDuration();
  TakeInbox();
  ReapCancelled();
  if (requests_.empty()) {
    if (absl::Status health = executor_->health(); !health.ok()) {  // e.g. a hung worker
      LOG(ERROR) << "the world went down between steps: " << health;
      WorldDown(health);
      return;
    }
    Publish();
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](BatchEngine* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
                               return e->stopping_ || !e->inbox_.empty();
                             },
                             this),
                         absl::Milliseconds(100));
    return;
  }
  ProposeDrafts();
  const StepPlan plan = scheduler_->Schedule();
  if (plan.empty()) {
    // Every request fits the cache alone, so this only happens while a cancelled request
    // still holds blocks; the next ReapCancelled frees them.
    LOG_EVERY_N(WARNING, 1000) << "nothing schedulable with " << requests_.size()
                               << " requests in flight";
    absl::SleepFor(absl::Milliseconds(1));
    return;
  }
  if (!plan.preempted.empty()) {
    LOG(INFO) << "preempted " << plan.preempted.size()
              << " sequences (KV cache full); they will be recomputed";
  }
  Publish();  // the admitted requests count as running while their step runs
  RunStep(plan);
  Publish();
}

bool BatchEngine::RecoverWorld() {
  SetReady(false);
  const absl::Status started = executor_->Start();
  if (!started.ok()) {
    LOG(WARNING) << "the worker world did not start: " << started;
    WorldDown(started);
    if (!options_.restart_world) {
      StopFatal(started, started);
      return false;
    }
    if (!ever_up_ && absl::IsFailedPrecondition(started) &&
        ++load_failures_ >= options_.max_load_failures) {
      LOG(ERROR) << "the workers refused " << load_failures_
                 << " starts in a row before any world came up; stopping";
      StopFatal(
          absl::UnavailableError(absl::StrCat("the workers cannot serve: ", started.message())),
          started);
      return false;
    }
    if (!requests_.empty() && absl::Now() - down_since_ > options_.recovery_timeout) {
      FailAll(
          absl::UnavailableError(absl::StrCat("the worker world is down: ", started.message())));
    }
    return false;
  }
  // The workers' caches are new: rebuild the block map and requeue every request (none holds
  // blocks any more) in arrival order, to be recomputed from its token history.
  blocks_ = std::make_unique<BlockManager>(executor_->kv_blocks(), executor_->kv_block_size(),
                                           options_.prefix_caching);
  published_evictions_ = 0;
  scheduler_ = std::make_unique<Scheduler>(options_.scheduler, blocks_.get());
  std::vector<Sequence*> requeue;
  for (auto& [id, request] : requests_) {
    request->seq.computed = 0;
    request->seq.block_table.clear();
    request->seq.block_keys.clear();
    requeue.push_back(&request->seq);
  }
  std::sort(requeue.begin(), requeue.end(),
            [](const Sequence* a, const Sequence* b) { return a->id < b->id; });
  for (Sequence* seq : requeue) scheduler_->Enqueue(seq);
  if (!requeue.empty()) {
    LOG(INFO) << "world up again: recomputing " << requeue.size() << " requests";
  }
  world_up_ = true;
  ever_up_ = true;
  const std::vector<int> members = executor_->world_members();
  metrics_->SetWorldUp(members);
  {
    absl::MutexLock lock(&mu_);
    stats_.world_size = static_cast<int>(members.size());
    stats_.comm_backend = executor_->comm_backend();
    stats_.down_reason.clear();
  }
  Publish();  // the capacity Submit checks against
  SetReady(true);
  return true;
}

void BatchEngine::WorldDown(const absl::Status& why) {
  if (world_up_) down_since_ = absl::Now();
  world_up_ = false;
  metrics_->SetWorldDown(executor_->down_rank());
  {
    absl::MutexLock lock(&mu_);
    stats_.down_reason = static_cast<std::string>(why.message());
  }
  SetReady(false);
}

void BatchEngine::TakeInbox() {
  std::deque<std::unique_ptr<Request>> incoming;
  {
    absl::MutexLock lock(&mu_);
    incoming.swap(inbox_);
  }
  for (std::unique_ptr<Request>& request : incoming) {
    request->seq.id = next_seq_id_++;
    request->seq.prompt = request->spec.prompt;
    request->seq.generated = request->spec.resumed;
    request->streamer = std::make_unique<TextStreamer>(tokenizer_, request->spec.stop);
    Request* admitted = request.get();
    requests_[request->seq.id] = std::move(request);
    if (Resume(admitted)) scheduler_->Enqueue(&admitted->seq);
  }
}

bool BatchEngine::Resume(Request* request) {
  if (request->spec.grammar != nullptr) {  // its resumed tokens were checked by the validator
    request->constraint = std::make_unique<grammar::TokenConstraint>(
        request->spec.grammar, EndTokenIds(tokenizer_.eos_id(), request->spec.ignore_eos,
                                           request->spec.sampling.stop_token_ids));
    for (int32_t id : request->spec.resumed) {
      if (absl::Status taken = request->constraint->Accept(id, tokenizer_.TokenBytes(id));
          !taken.ok()) {
        Finish(request,
               absl::InvalidArgumentError(absl::StrCat("resume.token_ids: ", taken.message())));
        return false;
      }
    }
  }
  // The client holds the text of these tokens up to what the streamer released: feeding them
  // again leaves the streamer holding back exactly what the client has not received.
  for (int32_t id : request->spec.resumed) {
    absl::StatusOr<TextStreamer::Delta> delta = request->streamer->Feed(id);
    if (!delta.ok()) {
      Finish(request, absl::InvalidArgumentError(
                          absl::StrCat("resume.token_ids: ", delta.status().message())));
      return false;
    }
    if (delta->stopped) {  // the stream had ended at a stop string: say so, with no text
      End(request, NewMessage(request), tpserve::v1::FINISH_REASON_STOP);
      return false;
    }
  }
  return true;
}

void BatchEngine::ReapCancelled() {
  std::vector<Request*> cancelled;
  for (auto& [id, request] : requests_) {
    if (request->sink->cancelled()) cancelled.push_back(request.get());
  }
  for (Request* request : cancelled) {
    Finish(request, request->sink->deadline_passed()
                        ? absl::DeadlineExceededError("the request's deadline passed")
                        : absl::CancelledError("the client cancelled the request"));
  }
}

bool BatchEngine::RunStep(const StepPlan& plan) {
  tpserve::v1::Step step;
  step.set_step_id(next_step_id_++);
  std::vector<int32_t> tokens;
  int64_t samples = 0;
  // Sampling this step under a grammar, and how many proposals each verifies.
  std::vector<std::pair<Request*, int64_t>> constrained;
  for (const PlannedSequence& e : plan.entries) {
    Request& request = *requests_.at(e.seq->id);
    tokens.clear();
    for (int64_t pos = e.start; pos < e.start + e.count; ++pos) {
      tokens.push_back(e.seq->token_at(pos));
    }
    protocol::AddStepSequence({.seq_id = e.seq->id,
                               .tokens = tokens,
                               .start_pos = e.start,
                               .block_table = e.seq->block_table,
                               .sample = e.sample,
                               .sample_index = e.seq->generated.size(),
                               .draft_tokens = e.draft},
                              request.spec.sampling, {e.seq->prompt, e.seq->generated}, &step);
    samples += e.sample ? 1 : 0;
    if (e.sample && request.constraint != nullptr) constrained.emplace_back(&request, e.draft);
  }
  // The masks are computed while the world runs the forward pass, and go to rank 0 alone.
  step.set_masks_follow(!constrained.empty());
  auto fill_masks = [&](tpserve::v1::StepMasks* masks) {
    // Every mask of the step together gets at most the budget.
    const absl::Time deadline = absl::Now() + options_.mask_budget;
    std::string mask;
    for (auto [request, draft] : constrained) {
      // A mask past the budget: the token is drawn unmasked, dropped, and the request failed;
      // a verifying request's masks are sent for every position or none.
      const int first = masks->masks_size();
      request->mask_failed = request->constraint->Mask(deadline, &mask);
      if (!request->mask_failed.ok()) continue;
      protocol::AddSequenceMask(request->seq.id, mask, masks);
      if (draft == 0) continue;
      // Verifying proposals, a mask at each position: the grammar's state after those before.
      grammar::TokenConstraint after = *request->constraint;
      for (int64_t p = 1; p <= draft && request->mask_failed.ok(); ++p) {
        const int32_t proposed = request->seq.draft[p - 1];
        request->mask_failed = after.Accept(proposed, tokenizer_.TokenBytes(proposed));
        if (request->mask_failed.ok()) request->mask_failed = after.Mask(deadline, &mask);
        if (request->mask_failed.ok()) {
          protocol::AddSequenceMask(request->seq.id, mask, masks, static_cast<uint32_t>(p));
        }
      }
      if (!request->mask_failed.ok()) {
        masks->mutable_masks()->DeleteSubrange(first, masks->masks_size() - first);
      }
    }
  };
  absl::StatusOr<StepOutcome> outcome =
      constrained.empty() ? executor_->RunStep(step) : executor_->RunStep(step, fill_masks);
  if (!outcome.ok()) {
    WorldDown(outcome.status());
    if (!options_.restart_world) {
      LOG(ERROR) << "step " << step.step_id() << " failed: " << outcome.status();
      StopFatal(outcome.status(), outcome.status());
      return false;
    }
    LOG(ERROR) << "step " << step.step_id() << " failed, requeueing " << requests_.size()
               << " requests until the world is back: " << outcome.status();
    scheduler_->PreemptAll();
    FailPoisoned(plan, outcome.status());
    return false;
  }
  scheduler_->Commit(plan);
  {
    absl::MutexLock lock(&mu_);
    ++stats_.steps;
    stats_.preemptions += static_cast<int64_t>(plan.preempted.size());
  }
  const absl::Time now = absl::Now();
  metrics_->batch_size.Observe(static_cast<double>(plan.entries.size()));
  metrics_->step_duration.Observe(Seconds(outcome->wall));
  metrics_->step_overhead.Observe(Seconds(StepOverhead(*outcome)));
  if (options_.step_trace != nullptr) {
    options_.step_trace->Record(step.step_id(), static_cast<int64_t>(plan.entries.size()),
                                plan.tokens, *outcome);
  }
  metrics_->preemptions.Increment(static_cast<double>(plan.preempted.size()));
  metrics_->prefix_cache_queries.Increment(static_cast<double>(plan.prefix_queried));
  metrics_->prefix_cache_hits.Increment(static_cast<double>(plan.prefix_hits));
  for (const PlannedSequence& e : plan.entries) {
    Request& request = *requests_.at(e.seq->id);
    request.failed_steps = 0;  // only failures in a row mark a request as poison
    if (request.admitted) continue;
    request.admitted = true;
    metrics_->queue_duration.Observe(Seconds(now - request.arrival));
    metrics_->prompt_tokens.Increment(static_cast<double>(request.seq.prompt.size()));
  }
  // One draw per sampling sequence, and one more per accepted proposal (CheckStepResult).
  if (outcome->result.tokens_size() < samples ||
      outcome->result.tokens_size() > samples + plan.draft_tokens) {
    LOG(ERROR) << "step " << step.step_id() << ": rank 0 sampled " << outcome->result.tokens_size()
               << " tokens, " << samples << " asked for with " << plan.draft_tokens << " proposals";
  }
  speculator_.ObserveStep(plan.tokens, outcome->wall);
  absl::flat_hash_map<uint64_t, int64_t> drafted;
  for (const PlannedSequence& e : plan.entries) {
    if (e.draft > 0) drafted[e.seq->id] = e.draft;
  }
  // Each sequence's draws are together, in the Step's order (CheckStepResult).
  const auto& sampled = outcome->result.tokens();
  std::vector<engine::SampleResult> draws;
  for (int i = 0, end = 0; i < sampled.size(); i = end) {
    const uint64_t id = sampled[i].seq_id();
    draws.clear();
    for (end = i; end < sampled.size() && sampled[end].seq_id() == id; ++end) {
      draws.push_back(protocol::FromSampledToken(sampled[end]));
    }
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    auto found = drafted.find(id);
    DeliverDraws(it->second.get(), draws, found != drafted.end() ? found->second : 0);
  }
  return true;
}

void BatchEngine::ProposeDrafts() {
  if (!speculator_.enabled()) return;  // drafts stay empty
  // Every known token but the last is computed: the next step is a decode step.
  auto decoding = [](const Sequence& seq) {
    return seq.computed > 0 && seq.computed + 1 == seq.length();
  };
  int64_t batch = 0;  // decoding sequences: a Step's plain share of the batch
  for (auto& [id, request] : requests_) batch += decoding(request->seq) ? 1 : 0;
  std::vector<DraftJob> jobs;  // draft mode: the draft model proposes for them all at once
  speculator_.BeginRound();
  for (auto& [id, request] : requests_) {
    Sequence& seq = request->seq;
    seq.draft.clear();
    if (!decoding(seq)) continue;
    // After m accepted proposals and one more draw the request holds m + 1 more tokens.
    const int64_t limit = request->spec.max_tokens - static_cast<int64_t>(seq.generated.size()) - 1;
    if (options_.draft == nullptr) {
      speculator_.Propose(seq, batch, limit, &seq.draft);
      KeepToGrammar(request.get());
    } else if (const int64_t k = speculator_.DraftLength(seq, batch, limit); k > 0) {
      jobs.push_back({.seq = &seq, .length = k, .draft = &seq.draft});
    }
  }
  if (jobs.empty()) return;
  options_.draft->Propose(jobs);
  speculator_.ObserveDraft(options_.draft->last_proposed(), options_.draft->last_wall());
  for (const DraftJob& job : jobs) KeepToGrammar(requests_.at(job.seq->id).get());
}

void BatchEngine::KeepToGrammar(Request* request) {
  if (request->constraint == nullptr || request->seq.draft.empty()) return;
  // A proposal the grammar refuses could never be drawn, nor could anything after it, or
  // after the grammar's end.
  grammar::TokenConstraint after = *request->constraint;
  size_t kept = 0;
  for (const int32_t id : request->seq.draft) {
    if (after.Ended() || !after.Accept(id, tokenizer_.TokenBytes(id)).ok()) break;
    ++kept;
  }
  request->seq.draft.resize(kept);
}

void BatchEngine::DeliverDraws(Request* request, absl::Span<const engine::SampleResult> draws,
                               int64_t drafted) {
  const uint64_t id = request->seq.id;
  const auto accepted = static_cast<int64_t>(draws.size()) - 1;  // the proposals kept
  if (drafted > 0) {
    metrics_->spec_draft_tokens.Increment(static_cast<double>(drafted));
    metrics_->spec_accepted_tokens.Increment(static_cast<double>(accepted));
    for (int64_t p = 1; p <= accepted; ++p) metrics_->CountAcceptedAt(static_cast<int>(p));
    speculator_.Record(id, drafted, accepted);
    request->spec_proposed += drafted;
  }
  for (size_t k = 0; k < draws.size(); ++k) {
    if (static_cast<int64_t>(k) < accepted) ++request->spec_accepted;  // in usage if it ends
    Deliver(request, draws[k]);
    if (!requests_.contains(id)) return;  // it ended: the rest of the draws are dropped
  }
  if (accepted > 0) scheduler_->Accept(&request->seq, accepted);
}

void BatchEngine::Deliver(Request* request, const engine::SampleResult& sampled) {
  Sequence& seq = request->seq;
  const RequestSpec& spec = request->spec;
  if (request->constraint != nullptr) {
    if (!request->mask_failed.ok()) {
      Finish(request, request->mask_failed);
      return;
    }
    // The worker was to keep to the mask: a token outside it is the worker's fault.
    if (absl::Status taken =
            request->constraint->Accept(sampled.token_id, tokenizer_.TokenBytes(sampled.token_id));
        !taken.ok()) {
      Finish(request, absl::InternalError(absl::StrCat(
                          "rank 0 sampled outside the structured_output mask: ", taken.message())));
      return;
    }
  }
  seq.generated.push_back(sampled.token_id);
  GenerateResponse message = NewMessage(request);
  message.add_token_ids(sampled.token_id);
  if (spec.sampling.logprobs > 0) {
    auto fill = [&](int32_t id, float logprob, tpserve::v1::TokenLogprob* out) {
      const std::string_view bytes = tokenizer_.TokenBytes(id);
      out->set_token_id(id);
      out->set_text(model::Utf8Lossy(bytes));
      out->set_bytes(bytes.data(), bytes.size());
      out->set_logprob(logprob);
    };
    tpserve::v1::TokenLogprobs* lp = message.add_logprobs();
    fill(sampled.token_id, sampled.logprob, lp->mutable_chosen());
    for (const engine::TokenLogprob& top : sampled.top) {
      fill(top.token_id, top.logprob, lp->add_top());
    }
  }
  FinishReason reason = TokenFinish(sampled.token_id, tokenizer_.eos_id(), spec.ignore_eos,
                                    spec.sampling.stop_token_ids);
  if (reason == tpserve::v1::FINISH_REASON_UNSPECIFIED) {
    absl::StatusOr<TextStreamer::Delta> delta = request->streamer->Feed(sampled.token_id);
    if (!delta.ok()) {
      Finish(request,
             absl::InternalError(absl::StrCat("detokenising: ", delta.status().message())));
      return;
    }
    message.set_text(std::move(delta->text));
    reason = TextFinish(delta->stopped, static_cast<int64_t>(seq.generated.size()), spec.max_tokens,
                        request->constraint != nullptr && request->constraint->Ended());
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.generated_tokens;
  }
  const absl::Time now = absl::Now();
  metrics_->generated_tokens.Increment();
  if (request->last_token == absl::InfinitePast()) {
    metrics_->time_to_first_token.Observe(Seconds(now - request->arrival));
  } else {
    metrics_->inter_token_latency.Observe(Seconds(now - request->last_token));
  }
  request->last_token = now;
  if (reason == tpserve::v1::FINISH_REASON_UNSPECIFIED) {
    request->sink->Send(std::move(message));
    return;
  }
  if (!request->streamer->stopped()) message.mutable_text()->append(request->streamer->Finish());
  End(request, std::move(message), reason);
}

GenerateResponse BatchEngine::NewMessage(Request* request) {
  GenerateResponse message;
  message.set_request_id(request->spec.request_id);
  if (!request->sent) message.set_seed(request->spec.sampling.seed);  // so a client can resume
  request->sent = true;
  return message;
}

void BatchEngine::End(Request* request, GenerateResponse message, FinishReason reason) {
  message.set_finish_reason(reason);
  tpserve::v1::Usage* usage = message.mutable_usage();
  usage->set_prompt_tokens(static_cast<uint32_t>(request->seq.prompt.size()));
  usage->set_completion_tokens(static_cast<uint32_t>(request->seq.generated.size()));
  usage->set_speculative_proposed_tokens(static_cast<uint32_t>(request->spec_proposed));
  usage->set_speculative_accepted_tokens(static_cast<uint32_t>(request->spec_accepted));
  request->sink->Send(std::move(message));
  Finish(request, absl::OkStatus());
}

void BatchEngine::FailPoisoned(const StepPlan& plan, const absl::Status& cause) {
  std::vector<Request*> poisoned;
  for (const PlannedSequence& e : plan.entries) {
    Request* request = requests_.at(e.seq->id).get();
    if (++request->failed_steps >= options_.max_failed_steps) poisoned.push_back(request);
  }
  for (Request* request : poisoned) {
    LOG(WARNING) << "request " << request->spec.request_id << " failed in " << request->failed_steps
                 << " steps; giving up on it";
    Finish(request, absl::UnavailableError(
                        absl::StrCat("the workers failed ", request->failed_steps,
                                     " steps of this request; the last: ", cause.message())));
  }
}

void BatchEngine::Finish(Request* request, const absl::Status& status_in) {
  // A copy: `status_in` may be a member of *request, which goes below.
  const absl::Status status = status_in;  // NOLINT(performance-unnecessary-copy-initialization)
  // The request's blocks, metrics and stats are settled before its sink closes: a client
  // that sees its stream end then sees the freed KV blocks and its counted request.
  metrics_->CountRequest(status, request->spec.api);
  metrics_->request_duration.Observe(Seconds(absl::Now() - request->arrival));
  if (scheduler_ != nullptr) scheduler_->Remove(&request->seq);
  speculator_.Forget(request->seq.id);
  if (options_.draft != nullptr) options_.draft->Forget(request->seq.id);
  std::shared_ptr<ResponseSink> sink = std::move(request->sink);
  requests_.erase(request->seq.id);  // destroys *request
  Publish();
  sink->Close(status);
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

void BatchEngine::StopFatal(const absl::Status& requests, const absl::Status& fatal) {
  {
    // Before any sink closes: whoever sees the stream end sees the engine stopped.
    absl::MutexLock lock(&mu_);
    fatal_ = fatal;
    stopping_ = true;
  }
  FailAll(requests);
}

void BatchEngine::FailAll(const absl::Status& status) {
  std::deque<std::unique_ptr<Request>> incoming;
  {
    absl::MutexLock lock(&mu_);
    incoming.swap(inbox_);
  }
  for (std::unique_ptr<Request>& request : incoming) {
    metrics_->CountRequest(status, request->spec.api);
    request->sink->Close(status);
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
  std::vector<Request*> all;
  for (auto& [id, request] : requests_) all.push_back(request.get());
  for (Request* request : all) Finish(request, status);
}

void BatchEngine::Publish() {
  if (scheduler_ != nullptr) {
    metrics_->requests_running.Set(static_cast<double>(scheduler_->running()));
    metrics_->requests_waiting.Set(static_cast<double>(scheduler_->waiting()));
  }
  if (blocks_ != nullptr && blocks_->total_blocks() > 0) {
    metrics_->kv_cache_usage.Set(1.0 - static_cast<double>(blocks_->free_blocks()) /
                                           static_cast<double>(blocks_->total_blocks()));
    metrics_->prefix_cache_blocks.Set(static_cast<double>(blocks_->cached_blocks()));
    metrics_->prefix_cache_evictions.Increment(
        static_cast<double>(blocks_->evictions() - published_evictions_));
    published_evictions_ = blocks_->evictions();
  }
  absl::MutexLock lock(&mu_);
  stats_.running = scheduler_ != nullptr ? scheduler_->running() : 0;
  stats_.waiting = scheduler_ != nullptr ? scheduler_->waiting() : 0;
  stats_.kv_blocks_total = blocks_ != nullptr ? blocks_->total_blocks() : 0;
  stats_.kv_blocks_free = blocks_ != nullptr ? blocks_->free_blocks() : 0;
  stats_.kv_block_size = blocks_ != nullptr ? blocks_->block_size() : 0;
  stats_.kv_blocks_cached = blocks_ != nullptr ? blocks_->cached_blocks() : 0;
}

}  // namespace tpserve::coordinator
