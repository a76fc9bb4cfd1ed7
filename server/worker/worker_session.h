// WorkerSession: one coordinator Session on a worker, from Init to Shutdown. The gRPC
// handler thread reads the stream (store replies go straight to the StreamStore, so the
// rendezvous can progress while the world is being built); an executor thread owned by the
// session builds the world (StreamStore → communicator → shard → LlamaModel), answers Ready
// and runs the Steps in order: from the stream or, when Init offered a shared-memory step
// link this worker can map (it is on the coordinator's host), from the link, where it posts
// their results too. With Init.heartbeat_interval_ms, a Heartbeat thread writes a Heartbeat
// every interval from the accepted Init on (while the Session waits for the worker too),
// whatever the executor does. Shutdown, the end of the stream or Supersede()
// (a coordinator with a later epoch takes the worker over) abandons a load in progress (the
// loader polls the session's closed state between tensors), aborts the communicator and
// releases the model. Writes to the stream are serialised by a mutex. Used only by
// WorkerService; not reusable across streams. Run, Supersede and the executor may run at once;
// Supersede is the only method another thread may call.
#ifndef TPSERVE_SERVER_WORKER_WORKER_SESSION_H_
#define TPSERVE_SERVER_WORKER_WORKER_SESSION_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/comm/shm/step_link.h"
#include "server/engine/backend.h"
#include "server/engine/llama_model.h"
#include "server/engine/sampler.h"
#include "server/model/weights/weight_source.h"
#include "server/protocol/session_codec.h"
#include "server/worker/comm_factory.h"
#include "server/worker/heartbeat.h"
#include "server/worker/init_validator.h"
#include "server/worker/model_root.h"
#include "server/worker/rank_factory.h"
#include "server/worker/stream_store.h"
#include "server/worker/timed_communicator.h"
#include "server/worker/worker_metrics.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve::worker {

struct WorkerServiceOptions {
  CommFactory comm_factory = DefaultCommFactory();
  // Bound on one rendezvous store round trip (Set/Add; slack on top of Get/Wait timeouts).
  absl::Duration store_op_timeout = absl::Seconds(10);
  // After a fatal error message, how long the coordinator has to close the stream before
  // the worker cancels it.
  absl::Duration close_grace = absl::Seconds(5);
  // Where the worker's Prometheus metrics go; null: not recorded.
  WorkerMetrics* metrics = nullptr;
  // The CUDA ordinal this worker computes on; -1: the CPU (threads from Init).
  int device = -1;
  // What an Init may ask of this worker (ValidateInit).
  InitLimits init_limits = HostInitLimits();
  // The directory Init's model_path must resolve under (--model_root); the default has none
  // and refuses every model.
  ModelRoot model_root;
  // Exact mode whatever Init says (the worker's --dequantize).
  bool dequantize = false;
  // How long a superseded Session's coordinator, told why, has to end its stream (it then
  // sees ABORTED) before the worker cancels the stream (it sees CANCELLED).
  absl::Duration supersede_grace = absl::Seconds(1);
};

// Why a superseded Session ends (its error message and status).
inline constexpr char kSupersededMessage[] = "superseded by a coordinator with a later epoch";

// An Init the worker accepted: what it asks, and its model path resolved under the model root.
struct AcceptedInit {
  protocol::WorldAssignment world;
  std::string model_path;
};

using SessionStream =
    grpc::ServerReaderWriterInterface<tpserve::v1::WorkerMessage, tpserve::v1::CoordinatorMessage>;

class WorkerSession {
 public:
  // The Session `init` opened (ReadInit). Its heartbeats start here, whether or not the worker
  // serves it yet. `on_closing` runs once the stream has ended, Shutdown arrived or the Session
  // was superseded, before the world is released.
  WorkerSession(grpc::ServerContext* context, SessionStream* stream,
                const WorkerServiceOptions& options, AcceptedInit init,
                std::function<void()> on_closing);
  ~WorkerSession();
  WorkerSession(const WorkerSession&) = delete;
  WorkerSession& operator=(const WorkerSession&) = delete;

  // Reads a Session's first message and checks it: an Init that ValidateInit accepts, whose
  // model resolves under the model root. Otherwise the refusal, also written to the stream as an
  // error message (Cancelled, with nothing written, when the stream ended first).
  static absl::StatusOr<AcceptedInit> ReadInit(SessionStream* stream,
                                               const WorkerServiceOptions& options);

  // Serves the stream until Shutdown or its end; runs on the handler thread. ABORTED
  // (kSupersededMessage) when superseded and the coordinator ended the stream, else OK.
  grpc::Status Run();
  // Instead of Run: the worker will not serve this Session; stops its heartbeats and writes
  // `refusal` as an error message.
  void Refuse(const absl::Status& refusal);

  // Ends this Session for a coordinator with a later epoch; called from another thread, while
  // Run runs or before it starts. As the end of the stream would, it abandons the load and
  // aborts the communicator; the executor then writes kSupersededMessage as an error, and the
  // stream is cancelled unless its coordinator ends it within options.supersede_grace. Returns
  // then; Run may still be releasing the world.
  void Supersede() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Executor thread: builds the world, then runs the inbox until Shutdown or close.
  void Execute();
  absl::Status BuildWorld(const protocol::WorldAssignment& init);
  // What Ready reports once the world is built.
  protocol::WorkerHoldings Holdings() const;
  // Drops the model, the communicator and the backend (the executor, at its end).
  void ReleaseWorld() ABSL_LOCKS_EXCLUDED(mu_);
  // Opens Init's step link when this worker can map it.
  void OpenStepLink() ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the stream until its end or Shutdown, handing messages to the store and the inbox.
  void ReadUntilEnd() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs Steps until Shutdown, the end of the stream or a failure: from the inbox (the stream)
  // and, with a step link, from the link, whichever has one.
  void ServeSteps();
  // Runs the step `bytes` (id `id`) from the link and posts its result there; false (after
  // Fail) when it cannot.
  bool RunLinkStep(uint64_t id, absl::string_view bytes);
  // Rank 0: waits for step's StepMasks (on the link or the stream) into step_masks_, until
  // `deadline` or the session's end.
  absl::Status AwaitMasks(const tpserve::v1::Step& step, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `step` into `out` (its timings, tokens or error).
  void RunStep(const tpserve::v1::Step& step, tpserve::v1::StepResult* out);
  // Sends a fatal error, then gives the coordinator close_grace to end the stream.
  void Fail(const std::string& message);
  bool Write(const tpserve::v1::WorkerMessage& message) ABSL_LOCKS_EXCLUDED(write_mu_);
  // Writes a Heartbeat; false when the stream is gone.
  bool SendHeartbeat();
  // The session is ending (the reader saw the end, or Supersede): fail the store, abort the
  // communicator, abandon the load, wake the executor. Idempotent; any thread.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  bool IsClosed() ABSL_LOCKS_EXCLUDED(mu_);
  bool IsSuperseded() ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ServerContext* const context_;
  SessionStream* const stream_;
  const WorkerServiceOptions& options_;
  const protocol::WorldAssignment init_;  // what Init asks
  const std::function<void()> on_closing_;

  absl::Mutex write_mu_;                // serialises stream_->Write (one writer at a time)
  std::unique_ptr<StreamStore> store_;  // made by the constructor; thread-safe
  // The coordinator's step link, when Init offered one this worker can map; set (under mu_,
  // for Close) before the executor starts; the executor reads it unlocked (its Ring is
  // thread-safe).
  std::unique_ptr<comm::ShmStepLink> link_;
  std::atomic<uint64_t> steps_done_{0};  // steps the executor finished (Heartbeat)

  absl::Mutex mu_;
  struct Inbound {
    tpserve::v1::CoordinatorMessage message;  // Step, StepMasks, Init (refused) or Shutdown
    int64_t received_unix_ns = 0;             // when the reader got it
  };
  std::deque<Inbound> inbox_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;        // no more messages will arrive
  bool superseded_ ABSL_GUARDED_BY(mu_) = false;    // Supersede() was called
  bool stream_ended_ ABSL_GUARDED_BY(mu_) = false;  // the reader saw the end (or Shutdown)
  TimedCommunicator* comm_for_abort_ ABSL_GUARDED_BY(mu_) = nullptr;

  // Owned by the executor thread.
  int rank_ = 0;
  int threads_ = 1;  // compute threads in use
  // Whether the executor may poll the link for the next step (this host's ranks and the
  // coordinator each have a core between steps).
  bool poll_for_steps_ = false;
  const std::string model_path_;  // Init's model_path resolved under the model root
  std::unique_ptr<model::WeightSource> weights_;
  std::unique_ptr<engine::Backend> backend_;
  std::optional<WorkerMetrics::Rank> metrics_;  // this rank's, when options_.metrics is set
  std::unique_ptr<TimedCommunicator> comm_;
  std::unique_ptr<engine::LlamaModel> model_;
  engine::Sampler sampler_;
  std::vector<float> logits_;            // [rows, vocab] of the current step
  uint64_t last_step_id_ = 0;            // the latest step run
  tpserve::v1::StepMasks step_masks_;    // the current step's masks (rank 0; reused)
  tpserve::v1::Step link_step_;          // the step read from the link (reused)
  tpserve::v1::StepResult link_result_;  // its result (reused)
  std::string link_bytes_;               // its result serialized (reused)

  // Last: stopped (destroyed) first, before what its beats use.
  std::optional<Heartbeat> heartbeat_;  // when Init asked for heartbeats
};

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_WORKER_SESSION_H_
