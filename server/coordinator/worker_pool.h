// WorkerPool: the coordinator's side of the worker world, the StepExecutor of a world of
// `tpserve worker` processes. It dials every worker (list position = rank), opens one Session
// per worker, sends Init, hands the workers' rendezvous StoreRequests to its RendezvousServer,
// waits (bounded) for every Ready and then fans each Step out to all workers and joins their
// StepResults under a per-step deadline. When every worker is on this host, Steps and results
// go through a shared-memory step link (ShmStepLink, offered in Init) instead of the Session
// streams.
//
// A broken stream, a worker's error, a missed deadline or a worker silent past hang_timeout
// (workers heartbeat on their Session, whatever they are doing) marks the world DOWN with the
// worker's rank and reason; the pool cancels every Session (so the workers abort their
// communicators and can be re-initialised), and every later RunStep fails fast with
// UNAVAILABLE until Start() builds a new world generation.
//
// An elastic world (min_world_size below the list's size): a worker that cannot rejoin within
// rejoin_timeout of being lost (it does not answer, or every world with it fails) is left out,
// and Start() builds the largest world of at least min_world_size answering workers whose size
// the model can be split for (can_split), ranks in list order. A prober thread keeps dialling
// the left-out workers; one that answers steadily for its hold (1 s, doubling with each time it
// was left out, at most kMaxHold: a flapping worker cannot cause a storm of rebuilds) marks the
// world down, so that the owner's next Start() grows it back. Every world computes the same
// logits (the canonical path), so the sequences recomputed in the new world go on identically.
//
// Thread-safety: Start() and Shutdown() are called by the owner, never concurrently with
// each other or with RunStep(); RunStep() may be called from any thread (calls are
// serialised); the accessors and status() are safe from any thread. Internally one reader
// thread per Session dispatches the worker's messages; blocking store operations (Get/Wait)
// each run on their own short-lived thread so the reader never blocks.
#ifndef TPSERVE_SERVER_COORDINATOR_WORKER_POOL_H_
#define TPSERVE_SERVER_COORDINATOR_WORKER_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "kernels/kv_block.h"
#include "server/comm/shm/step_link.h"
#include "server/comm/store.h"
#include "server/coordinator/rendezvous_server.h"
#include "server/coordinator/step_executor.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve::coordinator {

struct WorkerPoolOptions {
  std::vector<std::string> workers;  // "host:port" of each worker; position = rank
  // How the workers are dialled: the cluster's mutual TLS (MakeClusterChannelCredentials;
  // each worker's certificate must name the host it is dialled by); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The model's vocabulary as the coordinator read it: every Ready must report it, and
  // sampled ids are checked against it (0: taken from rank 0's Ready, unchecked).
  int32_t vocab_size = 0;
  std::string model_path;                  // as the workers see it
  uint64_t kv_budget_bytes = 64ull << 20;  // per worker
  uint32_t kv_block_size = kKvBlockSize;   // tokens per KV block
  uint32_t threads = 0;                    // compute threads per worker (0: its default)
  bool dequantize = false;                 // exact mode: workers dequantise weights at load
  bool float_row_sums = false;             // the canonical path off (EngineOptions::tp_invariant)
  // How the workers talk: AUTO (CPU workers: shared memory on one host, else Gloo; GPU workers:
  // NCCL), SHM, GLOO (GPU workers stage these through host memory) or NCCL.
  tpserve::v1::CommBackend backend = tpserve::v1::COMM_BACKEND_AUTO;
  absl::Duration comm_timeout = absl::Seconds(30);    // per collective, and the rendezvous
  absl::Duration ready_timeout = absl::Seconds(120);  // Init → every Ready
  absl::Duration step_deadline = absl::Seconds(30);   // when a Step carries no deadline_ms
  absl::Duration shutdown_grace = absl::Seconds(5);   // for workers to close after Shutdown
  // Offer the workers a shared-memory step link (ShmStepLink); used when every worker maps it,
  // i.e. every worker is on this host.
  bool step_link = true;
  // The most bytes of a step's masks that go on the link (at most ShmStepLink::kMasksBytes,
  // which holds 256 masks of a 64k vocabulary); larger masks take rank 0's stream.
  int64_t link_masks_bytes = comm::ShmStepLink::kMasksBytes;
  // A worker that stops sending (it heartbeats every hang_timeout / 8) is named hung within
  // this long: the world is marked down naming it, and `on_hung` is called. Zero: no heartbeats.
  // Before a rank's first message of a world, kFirstWordGrace (1 s) more is allowed (for its
  // server to take the Session call).
  absl::Duration hang_timeout = absl::Seconds(2);
  // Called (on the watchdog thread, no lock held) with the rank found hung; e.g. `serve` kills
  // that child so that it is restarted. May be empty.
  std::function<void(int rank)> on_hung;
  // The elastic world (above): the fewest workers to serve with (-1: all of them, never
  // shrinking), how long a lost worker has to rejoin before the world goes on without it, and
  // whether the model splits across a world of a given size (null: any).
  int min_world_size = -1;
  absl::Duration rejoin_timeout = absl::Seconds(5);
  std::function<absl::Status(int world_size)> can_split;
  absl::Duration probe_timeout = absl::Milliseconds(500);  // to connect to a worker
  // Sent in every Init: a later epoch takes busy workers over from an earlier coordinator.
  // 0: this process's start time (unix ns), taken when the pool is made.
  uint64_t coordinator_epoch = 0;
};

// Splits "h:p,h:p" into addresses; InvalidArgument for an empty list or a bad entry.
absl::StatusOr<std::vector<std::string>> ParseWorkerList(const std::string& list);

// --min_world_size against the worker list: -1 (the full world) or 1..workers.
absl::Status CheckMinWorldSize(int min_world_size, int workers);

class WorkerPool final : public StepExecutor {
 public:
  explicit WorkerPool(WorkerPoolOptions options);
  ~WorkerPool() override;  // Shutdown("pool destroyed")
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Builds a new world generation: tears down the previous one, dials, Inits, serves the
  // rendezvous and waits for every Ready (bounded by ready_timeout). On failure the world
  // is DOWN and the Status names the rank and the reason.
  absl::Status Start() override;

  // Sends `step` to every worker, then (step.masks_follow) fills its masks and sends them to
  // rank 0, and joins the results. UNAVAILABLE at once while the world is down;
  // DEADLINE_EXCEEDED (and the world down) when a worker misses the deadline
  // (step.deadline_ms, else options.step_deadline); the worker's error otherwise.
  using StepExecutor::RunStep;
  absl::StatusOr<StepOutcome> RunStep(const tpserve::v1::Step& step,
                                      const StepMaskFill& masks) override;

  // Sends Shutdown to every worker and closes the Sessions (bounded). Idempotent.
  void Shutdown(const std::string& reason);

  // The workers configured, and (valid after a successful Start()) the world now up.
  int configured_workers() const { return static_cast<int>(options_.workers.size()); }
  int world_size() const;
  std::vector<int> world_members() const override;
  // Valid after a successful Start().
  int64_t kv_blocks() const override;
  int64_t kv_block_size() const override { return options_.kv_block_size; }
  int32_t vocab_size() const;
  uint64_t generation() const;
  // The communicator the workers built ("shm", "gloo", "nccl", "local"); valid after Start().
  std::string comm_backend() const override;
  // Whether Steps go over the shared-memory step link; valid after Start(), owner thread.
  bool steps_over_link() const { return use_link_; }
  // OK while the world is up; the DOWN reason otherwise (UNAVAILABLE before Start()).
  absl::Status status() const;
  absl::Status health() const override { return status(); }
  // The worker (its position in the list) that took the world down last (-1: none named).
  int down_rank() const override;
  uint64_t coordinator_epoch() const { return epoch_; }

 private:
  struct Session;  // one worker's stream, reader thread and results
  // What the elastic world knows of each configured worker (guarded by mu_).
  struct Standing {
    absl::Time lost_since = absl::InfiniteFuture();       // blamed or silent, not back in a world
    absl::Time answering_since = absl::InfiniteFuture();  // while left out: answering from
    bool left_out = false;
    int times_left_out = 0;
  };
  enum class State { kIdle, kStarting, kUp, kDown };

  bool elastic() const { return options_.min_world_size > 0; }
  // The workers of the next world (positions in the list), or why none can be built now.
  absl::StatusOr<std::vector<int>> ChooseMembers() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether each worker (all of them, at once) accepts a connection within probe_timeout.
  std::vector<bool> ProbeWorkers(const std::vector<int>& which) const;
  // The prober thread: dials the left-out workers while the world is up, and marks it down to
  // grow once one has answered for its hold.
  void Probe() ABSL_LOCKS_EXCLUDED(mu_);
  // Checks every session's Ready (protocol::DecodeReady) and takes the world's shape from
  // them: the smallest KV cache, rank 0's vocabulary and communicator, whether every rank is
  // on the step link. The world is then up; the first bad Ready marks it down instead.
  absl::Status AdoptReadiesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReadLoop(Session* s);
  // ReadLoop's work: handles the worker's messages until its stream ends.
  void ReadMessages(Session* s);
  // Wait, bounded by `deadline` (`budget` after the fan-out), for every rank's result of
  // `step_id`: on the streams, or on the link's bell (rung by link results and by the readers).
  absl::Status AwaitResultsOnStreams(uint64_t step_id, absl::Time deadline, absl::Duration budget)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AwaitResultsOnLink(uint64_t step_id, absl::Time deadline, absl::Duration budget)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Marks the world down, blaming the first rank without a result.
  // Fills step `step_id`'s masks and sends them to rank 0: on the link when the Step went
  // there and they fit, else on its stream.
  void SendMasks(uint64_t step_id, bool on_link, const StepMaskFill& masks);
  void MissedDeadlineLocked(uint64_t step_id, absl::Duration budget)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands a worker's StoreRequest to the rendezvous server, its reply back to the worker.
  void ServeStoreRequest(Session* s, const tpserve::v1::StoreRequest& request);
  bool Write(Session* s, const tpserve::v1::CoordinatorMessage& message);
  void MarkDown(int rank, absl::StatusCode code, const std::string& reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  void MarkDownLocked(int rank, absl::StatusCode code, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels and joins every Session and rendezvous operation; forgets the generation's keys.
  void Teardown();
  // Watchdog thread: every kWatchPeriod, marks the world down when a rank has been silent
  // past hang_timeout, then calls on_hung.
  void Watch() ABSL_LOCKS_EXCLUDED(mu_);
  // The rank silent past its bound now, or -1; records it as down_rank_.
  int FindHungLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerPoolOptions options_;
  RendezvousServer rendezvous_;
  absl::Mutex step_mu_;  // serialises RunStep

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  absl::Status down_ ABSL_GUARDED_BY(mu_) = absl::UnavailableError("the world is not started");
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t current_step_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t kv_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t vocab_size_ ABSL_GUARDED_BY(mu_) = 0;
  std::string comm_backend_ ABSL_GUARDED_BY(mu_);
  int readers_alive_ ABSL_GUARDED_BY(mu_) = 0;
  int down_rank_ ABSL_GUARDED_BY(mu_) = -1;
  // [world_size] when each rank's Session last delivered a message (or, before its first, when
  // its Init went), and whether it has spoken in this generation.
  std::vector<absl::Time> last_heard_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> heard_ ABSL_GUARDED_BY(mu_);
  bool stop_watch_ ABSL_GUARDED_BY(mu_) = false;
  const uint64_t epoch_;
  std::thread watchdog_;
  std::thread prober_;
  std::vector<Standing> standing_ ABSL_GUARDED_BY(mu_);  // [configured workers]
  std::vector<int> members_ ABSL_GUARDED_BY(mu_);        // the world's workers, by rank
  std::vector<std::unique_ptr<Session>> sessions_;       // [world_size]; owner thread only
  // This generation's step link: made by Start before the readers, reset by Teardown after
  // them (readers only Ring it); used for Steps when every worker mapped it.
  std::unique_ptr<comm::ShmStepLink> link_;
  bool use_link_ = false;                          // owner thread / RunStep (never concurrent)
  tpserve::v1::CoordinatorMessage step_message_;   // RunStep's, reused (under step_mu_)
  std::string step_bytes_;                         // its Step serialized for the link
  tpserve::v1::CoordinatorMessage masks_message_;  // RunStep's StepMasks, reused (step_mu_)
  std::string masks_bytes_;                        // serialized for the link
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_WORKER_POOL_H_
