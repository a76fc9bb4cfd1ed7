#include "server/cli/worker_command.h"

#include <signal.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/common/cluster_tls.h"
#include "server/common/metrics_server.h"
#include "server/worker/model_root.h"
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
  std::shared_ptr<grpc::ServerCredentials> credentials;
  {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> made =
        MakeClusterServerCredentials(options.cluster_tls);
    if (!made.ok()) return made.status();
    credentials = *std::move(made);
  }
  const bool tls = options.cluster_tls.enabled();
  const std::string listen = ClusterListenAddress(options.listen, tls, options.insecure_cluster);
  if (listen != options.listen) {
    LOG(WARNING) << "worker: no cluster credentials (--cluster_ca_file, --cluster_cert_file, "
                    "--cluster_key_file): listening on "
                 << listen << " instead of " << options.listen
                 << " (loopback only); --insecure_cluster listens as asked";
  } else if (!tls && options.insecure_cluster) {
    LOG(WARNING) << "worker: --insecure_cluster: plaintext on " << listen
                 << " with no authentication: whoever reaches this port first can run a "
                    "session on this worker";
  }
  worker::WorkerServiceOptions service;
  const std::string root =
      !options.model_root.empty()
          ? options.model_root
          : (options.model.empty() ? std::string() : worker::ModelRoot::DefaultFor(options.model));
  if (!root.empty()) {
    absl::StatusOr<worker::ModelRoot> opened = worker::ModelRoot::Open(root);
    if (!opened.ok()) return opened.status();
    service.model_root = *std::move(opened);
    LOG(INFO) << "worker: models load from under " << service.model_root.dir();
  } else {
    LOG(WARNING) << "worker: no --model_root (or --model): every Init will be refused";
  }
  std::unique_ptr<MetricsServer> metrics_server;
  std::unique_ptr<worker::WorkerMetrics> metrics;
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
      worker::WorkerServer::Start(listen, std::move(service), credentials);
  if (!server.ok()) return server.status();
  if (!options.port_file.empty()) {
    // Written whole, then renamed: a reader never sees a partial number.
    const std::string tmp = options.port_file + ".tmp";
    std::ofstream(tmp) << (*server)->port() << "\n";
    if (std::rename(tmp.c_str(), options.port_file.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("worker: cannot write ", options.port_file));
    }
  }
  LOG(INFO) << "worker listening on " << listen << (tls ? " (mutual TLS" : " (plaintext")
            << ", port " << (*server)->port() << ")";
  int signal = 0;
  if (sigwait(&signals, &signal) != 0) return absl::InternalError("worker: sigwait failed");
  LOG(INFO) << "worker: signal " << signal << ", shutting down";
  (*server)->Shutdown();
  return absl::OkStatus();
}

}  // namespace tpserve::cli
