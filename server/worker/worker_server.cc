#include "server/worker/worker_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/common/server_hardening.h"

namespace tpserve::worker {

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const std::string& listen, WorkerServiceOptions options,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  std::unique_ptr<WorkerServer> s(new WorkerServer());
  s->service_ = std::make_unique<WorkerService>(std::move(options));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // A Step carries every sequence's tokens, block table and (with penalties) history: past
  // gRPC's default 4 MiB with long contexts and full batches. Bounded all the same.
  builder.SetMaxReceiveMessageSize(kMaxCoordinatorMessageBytes);
  HardenServerBuilder(&builder, /*reflection=*/false);  // and compressed messages refused
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  builder.AddListeningPort(listen, std::move(credentials), &s->port_);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("worker: cannot listen on ", listen));
  }
  return s;
}

WorkerServer::~WorkerServer() { Shutdown(); }

void WorkerServer::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  server_.reset();
}

}  // namespace tpserve::worker
