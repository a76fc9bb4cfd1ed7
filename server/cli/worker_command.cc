#include "server/cli/worker_command.h"

#include <signal.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/common/metrics_server.h"
#include "server/worker/worker_metrics.h"
#include "server/worker/worker_server.h"

namespace tpserve::cli {

absl::Status RunWorker(const WorkerCommandOptions& options) {
  if (options.listen.empty()) return absl::InvalidArgumentError("worker: --listen is required");
  // Blocked here, so every thread started below inherits the mask and sigwait gets them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  if (pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) {
    return absl::InternalError("worker: cannot block SIGINT/SIGTERM");
  }
  std::unique_ptr<MetricsServer> metrics_server;
  std::unique_ptr<worker::WorkerMetrics> metrics;
  worker::WorkerServiceOptions service;
  service.device = options.device;
  service.dequantize = options.dequantize;
  if (options.metrics_port > 0) {
    const std::string host = options.listen.substr(0, options.listen.rfind(':'));
    absl::StatusOr<std::unique_ptr<MetricsServer>> started =
        MetricsServer::Start(absl::StrCat(host, ":", options.metrics_port));
    if (!started.ok()) return started.status();
    metrics_server = *std::move(started);
    metrics = std::make_unique<worker::WorkerMetrics>(metrics_server->registry());
    service.metrics = metrics.get();
  }
  absl::StatusOr<std::unique_ptr<worker::WorkerServer>> server =
      worker::WorkerServer::Start(options.listen, std::move(service));
  if (!server.ok()) return server.status();
  if (!options.port_file.empty()) {
    // Written whole, then renamed: a reader never sees a partial number.
    const std::string tmp = options.port_file + ".tmp";
    std::ofstream(tmp) << (*server)->port() << "\n";
    if (std::rename(tmp.c_str(), options.port_file.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("worker: cannot write ", options.port_file));
    }
  }
  LOG(INFO) << "worker listening on " << options.listen << " (port " << (*server)->port() << ")";
  int signal = 0;
  if (sigwait(&signals, &signal) != 0) return absl::InternalError("worker: sigwait failed");
  LOG(INFO) << "worker: signal " << signal << ", shutting down";
  (*server)->Shutdown();
  return absl::OkStatus();
}

}  // namespace tpserve::cli
