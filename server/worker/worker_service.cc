#include "server/worker/worker_service.h"

#include <string>

#include "server/common/grpc_status.h"

namespace tpserve::worker {

grpc::Status WorkerService::Session(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<tpserve::v1::WorkerMessage, tpserve::v1::CoordinatorMessage>* stream) {
  {
    absl::MutexLock lock(&mu_);
    // The current Session's end may not have reached this side yet (a coordinator that
    // cancels and re-dials at once): give it a moment, and an ending one time to finish.
    auto free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_; };
    mu_.AwaitWithTimeout(absl::Condition(&free), absl::Seconds(1));
    if (busy_ && ending_) {
      mu_.AwaitWithTimeout(absl::Condition(&free), options_.close_grace + absl::Seconds(5));
    }
    if (busy_) {
      const absl::Status refused =
          absl::FailedPreconditionError("this worker already serves a Session");
      tpserve::v1::WorkerMessage error;
      error.set_error(std::string{refused.message()});
      stream->Write(error);  // so that the coordinator can tell why
      return ToGrpcStatus(refused);
    }
    busy_ = true;
    ending_ = false;
  }
  WorkerSession session(context, stream, options_, [this] {
    absl::MutexLock lock(&mu_);
    ending_ = true;
  });
  grpc::Status status = session.Run();
  absl::MutexLock lock(&mu_);
  busy_ = false;
  return status;
}

}  // namespace tpserve::worker
