// `tpserve worker`: serves the Worker service (and grpc.health.v1) on one address until
// SIGINT or SIGTERM, then shuts down cleanly. Stateless.
#ifndef TPSERVE_SERVER_CLI_WORKER_COMMAND_H_
#define TPSERVE_SERVER_CLI_WORKER_COMMAND_H_

#include <string>

#include "absl/status/status.h"

namespace tpserve::cli {

struct WorkerCommandOptions {
  std::string listen;       // HOST:PORT (port 0: any free one)
  std::string port_file;    // when set, the bound port is written there once listening
  int metrics_port = 0;     // Prometheus /metrics on the listen host at this port (0: none)
  int device = -1;          // CUDA ordinal to compute on; -1: the CPU
  bool dequantize = false;  // exact mode: dequantise weights at load, whatever Init says
};

// Blocks SIGINT/SIGTERM in the calling thread (call before any other thread starts), serves
// and returns OK after one of them arrived.
absl::Status RunWorker(const WorkerCommandOptions& options);

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_WORKER_COMMAND_H_
