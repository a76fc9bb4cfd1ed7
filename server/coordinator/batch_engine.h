// BatchEngine: the one token loop, of the server and of `tpserve generate` alike. One thread
// owns the scheduler, the block manager and every in-flight request: it admits submitted
// requests, plans a step (continuous batching, chunked prefill, preemption by recompute), runs
// it on a StepExecutor (a world of workers, or the model in process), and turns rank 0's
// sampled tokens into streamed messages (incremental text, stop strings, finish reasons).
// When the world goes down, every running sequence is requeued for recompute and the loop
// restarts the world; requests that outwait recovery_timeout fail with UNAVAILABLE. Cancelled
// requests leave the batch at the next step and free their blocks.
//
// Thread-safety: Submit, Drain, stats and the accessors may be called from any thread
// (they take mu_); everything else runs on the loop thread.
#ifndef TPSERVE_SERVER_COORDINATOR_BATCH_ENGINE_H_
#define TPSERVE_SERVER_COORDINATOR_BATCH_ENGINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/coordinator/block_manager.h"
#include "server/coordinator/draft_model.h"
#include "server/coordinator/request_validator.h"
#include "server/coordinator/response_sink.h"
#include "server/coordinator/scheduler.h"
#include "server/coordinator/serving_metrics.h"
#include "server/coordinator/speculator.h"
#include "server/coordinator/step_executor.h"
#include "server/coordinator/step_trace.h"
#include "server/model/tokenizer/tokenizer.h"

namespace tpserve::coordinator {

struct BatchEngineOptions {
  SchedulerOptions scheduler;
  int64_t max_queue = 256;                              // requests waiting for admission
  absl::Duration recovery_timeout = absl::Seconds(60);  // world down → fail waiting requests
  absl::Duration restart_backoff = absl::Seconds(1);    // most between attempts to restart
  // A request in this many steps in a row that took the world down (with no step of it
  // succeeding between them) is failed (UNAVAILABLE), so that one that breaks its workers
  // every time (or a worker that refuses it) cannot hold the server in a loop of rebuilds,
  // while requests that merely lived through many worker deaths go on (a kill can land in
  // the first step after the rebuild of the previous one: the chaos test saw 3 in a row).
  int max_failed_steps = 6;
  // Before the first world is up, this many starts in a row that a worker refused
  // (FAILED_PRECONDITION: it could not load the model, or refused the Init) stop the engine
  // with that error (fatal()): a load error that repeats is not worth retrying forever.
  int max_load_failures = 3;
  StepTrace* step_trace = nullptr;  // when set, every step is recorded there (not owned)
  // False for a one-shot run (`tpserve generate`): the first world that fails to start, or
  // goes down, stops the engine with that error (fatal()) and fails every request with it,
  // instead of being restarted.
  bool restart_world = true;
  // Reuse the KV blocks of cached prompt prefixes (BlockManager); `serve` turns it on.
  bool prefix_caching = false;
  // The most one step's structured-output token masks may take together (those of repeated
  // grammar states come from a cache); a request whose mask does not finish within it is
  // failed (RESOURCE_EXHAUSTED), so a grammar never makes a step slower than this.
  absl::Duration mask_budget = absl::Milliseconds(250);
  // Speculative decoding (serve --speculative): off by default.
  SpeculativeOptions speculative;
  // Draft mode's draft model (started; not owned, outlives the engine); null in other modes.
  DraftModel* draft = nullptr;
};

// A snapshot for GetModelInfo (and, later, metrics).
struct EngineStats {
  bool ready = false;  // the world is up and the engine not draining
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_free = 0;
  int64_t kv_block_size = 0;
  int64_t kv_blocks_cached = 0;
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t generated_tokens = 0;
  int world_size = 0;        // the ranks of the world up last (0 before any)
  std::string comm_backend;  // the world's communicator ("shm", "gloo", ...); empty before
  std::string down_reason;   // why the world is down (naming the rank); empty while it is up
};

class BatchEngine {
 public:
  // `executor` (not yet started: the loop starts it), `tokenizer` and `metrics` must outlive
  // the engine. `on_ready` (may be empty) is called whenever readiness changes.
  BatchEngine(const BatchEngineOptions& options, StepExecutor* executor,
              const model::Tokenizer& tokenizer, ServingMetrics* metrics,
              std::function<void(bool ready)> on_ready);
  ~BatchEngine();  // Stop()

  void Start();
  // Queues a validated request. UNAVAILABLE while the world is not ready or the engine is
  // draining; RESOURCE_EXHAUSTED when max_queue requests already wait. On OK the sink will
  // be closed exactly once.
  absl::Status Submit(RequestSpec spec, std::shared_ptr<ResponseSink> sink)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Refuses new requests from now on; those in flight run to their end.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits, at most `timeout`, until the world is ready (OK) or the engine has stopped (fatal(),
  // or UNAVAILABLE when it was stopped or is draining); DEADLINE_EXCEEDED at the timeout.
  absl::Status AwaitReady(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until no request is in flight, or `timeout`; true when idle.
  bool AwaitIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops the loop; requests still in flight are closed with UNAVAILABLE.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  EngineStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // OK while the engine runs or was stopped; the error that stopped it on its own otherwise
  // (max_load_failures).
  absl::Status fatal() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Request;

  void Loop();
  // One turn of the loop: recover the world, or take new requests and run one step.
  void Turn();
  // Restarts the world; fails requests that waited past recovery_timeout. False on failure.
  bool RecoverWorld();
  // The world is down (`why`): not ready, its blamed rank's metric 0, until RecoverWorld.
  void WorldDown(const absl::Status& why);
  // Fails every request with `requests` and stops the loop with fatal() = `fatal`.
  void StopFatal(const absl::Status& requests, const absl::Status& fatal);
  void TakeInbox() ABSL_LOCKS_EXCLUDED(mu_);
  // Primes a resumed request's text streamer with the tokens its client holds; false (the
  // request finished) when they already ended its stream at a stop string.
  bool Resume(Request* request);
  void ReapCancelled();
  // Runs one planned step; false when the world went down.
  bool RunStep(const StepPlan& plan);
  // Speculative decoding: sets the draft of every decoding request that proposes one for the
  // next step (and clears every other).
  void ProposeDrafts();
  // Under a grammar, cuts the request's draft before its first proposal the grammar refuses
  // (or that follows its end).
  void KeepToGrammar(Request* request);
  // Applies rank 0's draws for one sequence (one, or a verified draft's accepted proposals
  // and a draw) to its request, in order, and accounts for the draft (`drafted` positions).
  void DeliverDraws(Request* request, absl::Span<const engine::SampleResult> draws,
                    int64_t drafted);
  // Applies one sampled token to its request; closes and drops the request when it ends.
  void Deliver(Request* request, const engine::SampleResult& sampled);
  // A message of `request`'s stream: its id, and on the first its seed.
  tpserve::v1::GenerateResponse NewMessage(Request* request);
  // Sends `message` as the last of `request`'s stream (`reason`, usage) and finishes it.
  void End(Request* request, tpserve::v1::GenerateResponse message,
           tpserve::v1::FinishReason reason);
  // After the failed step of `plan`: fails the requests in it that reached max_failed_steps.
  void FailPoisoned(const StepPlan& plan, const absl::Status& cause);
  // Ends `request` (destroying *request) with `status`, which may be one of its own members.
  void Finish(Request* request, const absl::Status& status);
  void FailAll(const absl::Status& status);
  void Publish() ABSL_LOCKS_EXCLUDED(mu_);
  void SetReady(bool ready);

  const BatchEngineOptions options_;
  StepExecutor* const executor_;
  const model::Tokenizer& tokenizer_;
  ServingMetrics* const metrics_;
  const std::function<void(bool)> on_ready_;

  // Loop thread only.
  std::unique_ptr<BlockManager> blocks_;
  int64_t published_evictions_ = 0;  // blocks_->evictions() when last published
  std::unique_ptr<Scheduler> scheduler_;
  Speculator speculator_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Request>> requests_;
  uint64_t next_seq_id_ = 1;
  uint64_t next_step_id_ = 1;
  bool world_up_ = false;
  bool ever_up_ = false;   // a world has come up once
  int load_failures_ = 0;  // starts in a row a worker refused, before ever_up_
  absl::Time down_since_ = absl::InfinitePast();
  absl::Duration backoff_ = absl::ZeroDuration();  // the last wait between restart attempts

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Request>> inbox_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_request_number_ ABSL_GUARDED_BY(mu_) = 1;  // "req-N" of requests with no id
  uint64_t seed_state_ ABSL_GUARDED_BY(mu_);               // the last seed drawn
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // submitted and not yet closed
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread loop_;
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_BATCH_ENGINE_H_
