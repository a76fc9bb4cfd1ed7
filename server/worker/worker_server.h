// WorkerServer: a gRPC server holding a WorkerService and grpc.health.v1, listening on one
// address. Owns both. Start() returns once it listens; Shutdown() (also run by the
// destructor) cancels the open Session after a grace period and waits for the handlers.
// Thread-safe.
#ifndef TPSERVE_SERVER_WORKER_WORKER_SERVER_H_
#define TPSERVE_SERVER_WORKER_WORKER_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/worker/worker_service.h"

namespace tpserve::worker {

// The largest message a worker takes from its coordinator (a Step).
inline constexpr int kMaxCoordinatorMessageBytes = 64 << 20;

class WorkerServer {
 public:
  // `listen` is HOST:PORT; port 0 picks a free one (see port()). `credentials`: the cluster's
  // (MakeClusterServerCredentials); null: plaintext.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(
      const std::string& listen, WorkerServiceOptions options = {},
      std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);
  ~WorkerServer();

  int port() const { return port_; }
  void Shutdown(absl::Duration grace = absl::Seconds(2));

 private:
  WorkerServer() = default;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_WORKER_SERVER_H_
