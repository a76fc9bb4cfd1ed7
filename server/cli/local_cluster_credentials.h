// File: server/cli/local_cluster_credentials.h
//
// LocalClusterCredentials: the mutual TLS between `tpserve serve` and its local workers,
// made at every start and kept off disk. An EphemeralCa (its private key never leaves this
// process) issues one certificate for the workers and one for the coordinator, both EC
// P-256 with subjectAltNames IP:127.0.0.1 and DNS:localhost. The workers' CA certificate,
// certificate and key are written to sealed memfds that the worker children inherit and
// read as /proc/self/fd/N (worker_args()); the coordinator's stay in memory (coordinator()).
// Owns the memfds (closed on destruction). Immutable after Create(); thread-safe.
#ifndef TPSERVE_SERVER_CLI_LOCAL_CLUSTER_CREDENTIALS_H_
#define TPSERVE_SERVER_CLI_LOCAL_CLUSTER_CREDENTIALS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/common/cluster_tls.h"

namespace tpserve::cli {

class LocalClusterCredentials {
 public:
  // Certificates valid for `validity` from now.
  static absl::StatusOr<std::unique_ptr<LocalClusterCredentials>> Create(absl::Duration validity);
  ~LocalClusterCredentials();
  LocalClusterCredentials(const LocalClusterCredentials&) = delete;
  LocalClusterCredentials& operator=(const LocalClusterCredentials&) = delete;

  // --cluster_ca_file, --cluster_cert_file, --cluster_key_file for a child worker, naming
  // the inherited memfds.
  std::vector<std::string> worker_args() const;
  // The coordinator's side: the CA certificate, its certificate and key.
  const ClusterTlsPem& coordinator() const { return coordinator_; }

 private:
  LocalClusterCredentials() = default;
  ClusterTlsPem coordinator_;
  int ca_fd_ = -1, cert_fd_ = -1, key_fd_ = -1;  // the workers' PEM files (memfds)
};

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_LOCAL_CLUSTER_CREDENTIALS_H_
