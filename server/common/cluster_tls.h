// File: server/common/cluster_tls.h
//
// ClusterTls: the credentials between the coordinator and its workers (mutual TLS on the
// worker port). Both sides hold a certificate and key issued by the cluster CA and trust only
// that CA: a worker serves TLS and requires a client certificate chaining to it; the
// coordinator (and `generate --workers`) presents its certificate and verifies the worker's
// against the CA and against the host it dialled (the HOST of --workers HOST:PORT must be a
// DNS or IP subjectAltName of the worker's certificate). Without the three files, plaintext
// (a worker then listens on loopback only; see ClusterListenAddress). Stateless functions.
#ifndef TPSERVE_SERVER_COMMON_CLUSTER_TLS_H_
#define TPSERVE_SERVER_COMMON_CLUSTER_TLS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "server/common/server_tls.h"

namespace tpserve {

// The cluster credentials as files (--cluster_ca_file, --cluster_cert_file,
// --cluster_key_file): all three or none.
struct ClusterTlsOptions {
  std::string ca_file;    // PEM CA bundle the peer's certificate must chain to
  std::string cert_file;  // PEM certificate chain of this side
  std::string key_file;   // PEM private key of cert_file

  bool enabled() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

// The cluster credentials as PEM text (`serve`'s coordinator, which made them in memory).
struct ClusterTlsPem {
  std::string ca_cert;
  std::string cert;
  std::string key;
};

// InvalidArgument naming the flag when only some of the files are given, a file cannot be
// read or is not PEM of its kind, or the key is not the certificate's.
absl::Status CheckClusterTls(const ClusterTlsOptions& options);

// The worker port's credentials: mutual TLS through server_tls (files watched, rotation
// without restart), client certificates required and verified against ca_file; plaintext
// when `options` is not enabled.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeClusterServerCredentials(
    const ClusterTlsOptions& options);

// The coordinator's side, read once from the files; plaintext when `options` is not enabled.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeClusterChannelCredentials(
    const ClusterTlsOptions& options);
// The same from PEM text.
std::shared_ptr<grpc::ChannelCredentials> MakeClusterChannelCredentials(const ClusterTlsPem& pem);

// The address a worker listens on: `listen` itself with cluster credentials or with
// `insecure_cluster`; otherwise, when its host is not a loopback address (127.0.0.0/8,
// ::1, localhost), 127.0.0.1 on the same port — a worker without credentials obeys whoever
// reaches it first, so it is never reachable from another host unless asked for.
std::string ClusterListenAddress(const std::string& listen, bool credentials,
                                 bool insecure_cluster);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_CLUSTER_TLS_H_
