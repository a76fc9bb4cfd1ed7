#include "server/cli/serve_command.h"

#include <signal.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/cli/worker_processes.h"
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
  std::unique_ptr<WorkerProcesses> workers;
  if (options.coordinator.pool.workers.empty()) {
    ASSIGN_OR_RETURN(workers,
                     WorkerProcesses::Start(options.binary, options.tp, options.metrics_port,
                                            absl::Seconds(60), options.devices));
    options.coordinator.pool.workers = workers->addresses();
  }
  if (options.metrics_port > 0) {
    const std::string& listen = options.coordinator.listen;
    options.coordinator.metrics_listen =
        absl::StrCat(listen.substr(0, listen.rfind(':')), ":", options.metrics_port);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<coordinator::CoordinatorServer> server,
                   coordinator::CoordinatorServer::Start(options.coordinator));
  LOG(INFO) << "tpserve: serving " << options.coordinator.model_path << " on "
            << options.coordinator.listen << " (port " << server->port() << ") with "
            << options.coordinator.pool.workers.size() << " workers";
  int signal = 0;
  if (sigwait(&signals, &signal) != 0) return absl::InternalError("serve: sigwait failed");
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
