// `tpserve serve` (the embedded default: N local worker children plus the coordinator in
// this process) and `tpserve coordinator` (the coordinator alone, dialing workers that run
// elsewhere). Both serve until SIGINT/SIGTERM, then drain: health NOT_SERVING, new requests
// UNAVAILABLE, running streams finish (bounded by drain_timeout), exit. Stateless.
#ifndef TPSERVE_SERVER_CLI_SERVE_COMMAND_H_
#define TPSERVE_SERVER_CLI_SERVE_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/common/cluster_tls.h"
#include "server/coordinator/coordinator_server.h"
#include "server/http/openai_server.h"

namespace tpserve::cli {

struct ServeOptions {
  coordinator::CoordinatorOptions coordinator;  // pool.workers empty for `serve`
  int tp = 2;                                   // `serve`: local workers to start
  std::vector<int> devices;                     // `serve`: GPU of each worker; empty: CPU
  std::string binary;                           // `serve`: this program, to exec the workers
  // `coordinator`: mutual TLS with the workers (--cluster_*); none: plaintext. `serve` makes
  // its own (an ephemeral CA per start, LocalClusterCredentials) and refuses these.
  ClusterTlsOptions cluster_tls;
  int metrics_port = 0;      // coordinator /metrics (0: none); `serve`'s rank r on +1+r
  std::string metrics_host;  // address the coordinator's /metrics binds; empty: listen's host
  absl::Duration drain_timeout = absl::Seconds(30);
  // The OpenAI HTTP API (--http_port); listen empty: off. Its TLS and body limit are the
  // public gRPC port's.
  http::OpenAiServerOptions http;
};

// Blocks SIGINT/SIGTERM in the calling thread (call before any other thread starts).
absl::Status RunServe(ServeOptions options);

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_SERVE_COMMAND_H_
