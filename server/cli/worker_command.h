// `tpserve worker`: serves the Worker service (and grpc.health.v1) on one address until
// SIGINT or SIGTERM, then shuts down cleanly. Stateless.
#ifndef TPSERVE_SERVER_CLI_WORKER_COMMAND_H_
#define TPSERVE_SERVER_CLI_WORKER_COMMAND_H_

#include <string>

#include "absl/status/status.h"
#include "server/common/cluster_tls.h"

namespace tpserve::cli {

struct WorkerCommandOptions {
  std::string listen;       // HOST:PORT (port 0: any free one)
  std::string port_file;    // when set, the bound port is written there once listening
  int metrics_port = 0;     // Prometheus /metrics on the listen host at this port (0: none)
  int device = -1;          // CUDA ordinal to compute on; -1: the CPU
  bool dequantize = false;  // exact mode: dequantise weights at load, whatever Init says
  // Mutual TLS with the coordinator; without it the worker listens on loopback only...
  ClusterTlsOptions cluster_tls;
  bool insecure_cluster = false;  // ... unless this is set (--insecure_cluster)
  // Where Init's model_path may lead (--model_root); empty: the directory of `model`, and
  // with neither every Init is refused.
  std::string model_root;
  std::string model;  // --model, only for the default model_root
};

// Blocks SIGINT/SIGTERM in the calling thread (call before any other thread starts), serves
// and returns OK after one of them arrived.
absl::Status RunWorker(const WorkerCommandOptions& options);

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_WORKER_COMMAND_H_
