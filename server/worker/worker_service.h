// WorkerService: the tpserve.v1.Worker gRPC service of one worker process. It serves one
// Session at a time: a second concurrent Session gets FAILED_PRECONDITION after a one-second
// grace, unless the current one is ending by then (its stream closed: a coordinator
// re-initialising the world), in which case it waits for it, bounded by close_grace plus a
// margin. Each
// Session is a WorkerSession from Init to Shutdown. Thread-safe (gRPC calls it from its
// threads).
#ifndef TPSERVE_SERVER_WORKER_WORKER_SERVICE_H_
#define TPSERVE_SERVER_WORKER_WORKER_SERVICE_H_

#include "absl/base/thread_annotations.h"
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
  const WorkerServiceOptions options_;
  absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;    // a Session is being served
  bool ending_ ABSL_GUARDED_BY(mu_) = false;  // ... and its stream has closed
};

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_WORKER_SERVICE_H_
