// WorkerService: the tpserve.v1.Worker gRPC service of one worker process. It serves one
// Session at a time, each a WorkerSession from Init to Shutdown, and reads a Session's Init
// before deciding whether to serve it:
//  - a worker that is free serves it;
//  - an Init whose coordinator_epoch is later than the current Session's (and not 0) takes the
//    worker over: the current Session is superseded (WorkerSession::Supersede: its load is
//    abandoned, its communicator aborted, its coordinator told why and its stream ended),
//    and once it has ended (bounded) the new one is served;
//  - otherwise (an epoch not later) the new Session waits up to a one-second grace for the
//    current one to end, or, when the current one is already ending (its stream closed: a
//    coordinator re-initialising the world), for it to finish, bounded by close_grace plus a
//    margin; still busy, it gets FAILED_PRECONDITION (naming a later epoch when that is why);
//  - an Init whose epoch is earlier than the latest this worker has served (and not 0) is
//    refused at once, busy or free: a coordinator that was taken over from cannot take the
//    workers back between two worlds of the one that replaced it.
// Thread-safe (gRPC calls it from its threads).
#ifndef TPSERVE_SERVER_WORKER_WORKER_SERVICE_H_
#define TPSERVE_SERVER_WORKER_WORKER_SERVICE_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "server/worker/worker_session.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve::worker {

class WorkerService final : public tpserve::v1::Worker::Service {
 public:
  explicit WorkerService(WorkerServiceOptions options = {}) : options_(std::move(options)) {}

  grpc::Status Session(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<tpserve::v1::WorkerMessage,
                                                tpserve::v1::CoordinatorMessage>* stream) override;

 private:
  // Makes `session`, of a coordinator with `epoch`, the one served (see the file comment); the
  // refusal otherwise.
  absl::Status Admit(WorkerSession* session, uint64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);
  // Supersedes the current Session for `epoch` and waits for it to end.
  absl::Status TakeOverLocked(uint64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits, within the graces, for the worker to be free for a Session that takes nothing over.
  absl::Status AwaitFreeLocked(uint64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `session` has ended; returns once no takeover still reaches it.
  void Leave(WorkerSession* session) ABSL_LOCKS_EXCLUDED(mu_);

  const WorkerServiceOptions options_;
  absl::Mutex mu_;
  WorkerSession* current_ ABSL_GUARDED_BY(mu_) = nullptr;  // the Session being served
  uint64_t current_epoch_ ABSL_GUARDED_BY(mu_) = 0;        // its coordinator's epoch
  bool ending_ ABSL_GUARDED_BY(mu_) = false;               // ... and its stream has closed
  // The epoch of a Session waiting for the current one, which it supersedes, to end; 0: none.
  uint64_t claim_ ABSL_GUARDED_BY(mu_) = 0;
  int superseding_ ABSL_GUARDED_BY(mu_) = 0;        // takeovers inside current_->Supersede()
  uint64_t latest_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // the latest epoch ever admitted
};

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_WORKER_SERVICE_H_
