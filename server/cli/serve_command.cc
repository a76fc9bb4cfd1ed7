#include "server/cli/serve_command.h"

#include <errno.h>
#include <signal.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/cli/in_process_executor.h"
#include "server/cli/local_cluster_credentials.h"
#include "server/cli/worker_processes.h"
#include "server/common/server_tls.h"
#include "server/common/status_macros.h"
#include "server/model/weights/weight_source.h"
#include "server/worker/model_root.h"

namespace tpserve::cli {
namespace {

// How long the certificates `serve` makes for its local workers are valid: they are made
// anew at every start and trusted by no other process.
constexpr absl::Duration kLocalCertificateValidity = absl::Hours(30 * 24);

// The draft model's KV cache (--speculative draft): a draft is small, and a sequence that
// finds no block left merely does not draft.
constexpr int64_t kDraftKvBudgetBytes = 256ll << 20;

// --speculative draft: the draft model runs in this process, a world of one rank on one CPU
// thread (it runs between the target's steps, while the workers wait), as many rows per step
// as the target runs sequences.
void SetDraftWorld(coordinator::CoordinatorOptions* options) {
  const InProcessOptions draft{.kv_blocks = 0,
                               .kv_budget_bytes = kDraftKvBudgetBytes,
                               .max_batch_tokens = options->engine.scheduler.max_batch_tokens,
                               .max_sequences = options->engine.scheduler.max_running,
                               .threads = 1};
  options->draft_executor =
      [draft](
          const std::string& path) -> absl::StatusOr<std::unique_ptr<coordinator::StepExecutor>> {
    ASSIGN_OR_RETURN(std::unique_ptr<model::WeightSource> weights, model::OpenWeightSource(path));
    return std::make_unique<InProcessExecutor>(std::move(weights), draft);
  };
}

// serve's own worker children and the credentials made for them.
struct LocalWorkers {
  std::unique_ptr<LocalClusterCredentials> cluster;
  std::unique_ptr<WorkerProcesses> workers;
};

// Makes cluster credentials for serve's own workers, starts them and points the pool at them.
absl::StatusOr<LocalWorkers> StartLocalWorkers(ServeOptions* options) {
  if (options->cluster_tls.enabled()) {
    return absl::InvalidArgumentError(
        "serve makes its own cluster credentials for its local workers: --cluster_ca_file, "
        "--cluster_cert_file and --cluster_key_file are for worker and coordinator");
  }
  LocalWorkers local;
  ASSIGN_OR_RETURN(local.cluster, LocalClusterCredentials::Create(kLocalCertificateValidity));
  std::vector<std::string> worker_args = local.cluster->worker_args();
  worker_args.push_back(absl::StrCat(
      "--model_root=", worker::ModelRoot::DefaultFor(options->coordinator.model_path)));
  ASSIGN_OR_RETURN(local.workers, WorkerProcesses::Start(options->binary, options->tp,
                                                         options->metrics_port, absl::Seconds(60),
                                                         options->devices, std::move(worker_args)));
  coordinator::WorkerPoolOptions& pool = options->coordinator.pool;
  pool.workers = local.workers->addresses();
  // A hung child is killed, then restarted like one that died (the pool outlives neither).
  pool.on_hung = [children = local.workers.get()](int rank) { children->Kill(rank); };
  pool.credentials = MakeClusterChannelCredentials(local.cluster->coordinator());
  return local;
}

}  // namespace

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
  RETURN_IF_ERROR(CheckClusterTls(options.cluster_tls));
  LocalWorkers local;
  if (options.coordinator.pool.workers.empty()) {
    ASSIGN_OR_RETURN(local, StartLocalWorkers(&options));
  } else {
    ASSIGN_OR_RETURN(options.coordinator.pool.credentials,
                     MakeClusterChannelCredentials(options.cluster_tls));
  }
  if (options.metrics_port > 0) {
    const std::string& listen = options.coordinator.listen;
    const std::string host =
        options.metrics_host.empty() ? listen.substr(0, listen.rfind(':')) : options.metrics_host;
    options.coordinator.metrics_listen = absl::StrCat(host, ":", options.metrics_port);
  }
  SetDraftWorld(&options.coordinator);
  ASSIGN_OR_RETURN(std::unique_ptr<coordinator::CoordinatorServer> server,
                   coordinator::CoordinatorServer::Start(options.coordinator));
  std::unique_ptr<http::OpenAiServer> http;
  if (!options.http.listen.empty()) {
    options.http.tls = options.coordinator.tls;
    options.http.max_body_bytes = options.coordinator.limits.max_request_bytes;
    ASSIGN_OR_RETURN(http, http::OpenAiServer::Start(options.http, server->front_end()));
  }
  // The engine stops first (closing every stream), then the HTTP threads are joined.
  const auto stop = [&] {
    server->Shutdown();
    if (http != nullptr) http->Shutdown();
    http.reset();
    server.reset();
    if (local.workers != nullptr) local.workers->Stop();
  };
  LOG(INFO) << "tpserve: serving " << options.coordinator.model_path << " on "
            << options.coordinator.listen << " (port " << server->port() << ") with "
            << options.coordinator.pool.workers.size() << " workers ("
            << (options.coordinator.tls.enabled() ? "TLS" : "plaintext")
            << (options.coordinator.tls.client_ca_file.empty() ? "" : ", client certificates")
            << (options.coordinator.api_key_file.empty() ? "" : ", API keys")
            << (options.coordinator.reflection ? ", reflection" : "") << "; workers over "
            << (local.cluster != nullptr        ? "mutual TLS, ephemeral CA"
                : options.cluster_tls.enabled() ? "mutual TLS"
                                                : "plaintext")
            << ")";
  // Until a signal, or until the engine gives up on the workers (then exit non-zero with why).
  constexpr timespec kFatalCheck = {0, 250'000'000};
  int signal = -1;
  while (signal < 0) {
    signal = sigtimedwait(&signals, nullptr, &kFatalCheck);
    if (signal < 0 && errno != EAGAIN && errno != EINTR) {
      return absl::InternalError("serve: sigtimedwait failed");
    }
    if (absl::Status fatal = server->fatal(); signal < 0 && !fatal.ok()) {
      stop();
      return absl::Status(fatal.code(), absl::StrCat("serve: the workers cannot serve the model: ",
                                                     fatal.message()));
    }
  }
  LOG(INFO) << "tpserve: signal " << signal << ", draining (up to " << options.drain_timeout << ")";
  if (!server->Drain(options.drain_timeout)) {
    LOG(WARNING) << "tpserve: streams still running after " << options.drain_timeout
                 << "; cancelling them";
  }
  stop();
  LOG(INFO) << "tpserve: stopped";
  return absl::OkStatus();
}

}  // namespace tpserve::cli
