#include "server/cli/serve_command.h"

#include <errno.h>
#include <signal.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/cli/worker_processes.h"
#include "server/common/server_tls.h"
#include "server/common/status_macros.h"

namespace tpserve::cli {

absl::Status RunServe(ServeOptions options) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  if (pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) {
    return absl::InternalError("serve: cannot block SIGINT/SIGTERM");
  }
  // A mistake in the TLS flags is reported before any worker starts.
  RETURN_IF_ERROR(CheckServerTls(options.coordinator.tls));
  std::unique_ptr<WorkerProcesses> workers;
  if (options.coordinator.pool.workers.empty()) {
    ASSIGN_OR_RETURN(workers,
                     WorkerProcesses::Start(options.binary, options.tp, options.metrics_port,
                                            absl::Seconds(60), options.devices));
    options.coordinator.pool.workers = workers->addresses();
  }
  if (options.metrics_port > 0) {
    const std::string& listen = options.coordinator.listen;
    const std::string host =
        options.metrics_host.empty() ? listen.substr(0, listen.rfind(':')) : options.metrics_host;
    options.coordinator.metrics_listen = absl::StrCat(host, ":", options.metrics_port);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<coordinator::CoordinatorServer> server,
                   coordinator::CoordinatorServer::Start(options.coordinator));
  LOG(INFO) << "tpserve: serving " << options.coordinator.model_path << " on "
            << options.coordinator.listen << " (port " << server->port() << ") with "
            << options.coordinator.pool.workers.size() << " workers ("
            << (options.coordinator.tls.enabled() ? "TLS" : "plaintext")
            << (options.coordinator.tls.client_ca_file.empty() ? "" : ", client certificates")
            << (options.coordinator.api_key_file.empty() ? "" : ", API keys")
            << (options.coordinator.reflection ? ", reflection" : "") << ")";
  // Until a signal, or until the engine gives up on the workers (then exit non-zero with why).
  constexpr timespec kFatalCheck = {0, 250'000'000};
  int signal = -1;
  while (signal < 0) {
    signal = sigtimedwait(&signals, nullptr, &kFatalCheck);
    if (signal < 0 && errno != EAGAIN && errno != EINTR) {
      return absl::InternalError("serve: sigtimedwait failed");
    }
    if (absl::Status fatal = server->fatal(); signal < 0 && !fatal.ok()) {
      server->Shutdown();
      server.reset();
      if (workers != nullptr) workers->Stop();
      return absl::Status(fatal.code(), absl::StrCat("serve: the workers cannot serve the model: ",
                                                     fatal.message()));
    }
  }
  LOG(INFO) << "tpserve: signal " << signal << ", draining (up to " << options.drain_timeout << ")";
  if (!server->Drain(options.drain_timeout)) {
    LOG(WARNING) << "tpserve: streams still running after " << options.drain_timeout
                 << "; cancelling them";
  }
  server->Shutdown();
  server.reset();
  if (workers != nullptr) workers->Stop();
  LOG(INFO) << "tpserve: stopped";
  return absl::OkStatus();
}

}  // namespace tpserve::cli
