// ServerTls: the credentials of a public gRPC port. With no certificate, plaintext; with a
// certificate and key (PEM files), TLS through gRPC's certificate provider, which watches the
// files and takes up new ones (rotation) without a restart; with a client CA as well, mutual
// TLS: a client must present a certificate signed by that CA. The files are checked once at
// startup (readable, PEM, key matching the certificate) so that a misconfiguration is an
// error naming its flag rather than failed handshakes later. Stateless functions.
#ifndef TPSERVE_SERVER_COMMON_SERVER_TLS_H_
#define TPSERVE_SERVER_COMMON_SERVER_TLS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"

namespace tpserve {

// The flags the files came from, as error messages name them.
struct TlsFlagNames {
  const char* cert = "--tls_cert_file";
  const char* key = "--tls_key_file";
  const char* client_ca = "--tls_client_ca_file";
};

struct ServerTlsOptions {
  std::string cert_file;       // --tls_cert_file: PEM certificate chain; empty: plaintext
  std::string key_file;        // --tls_key_file: PEM private key of that certificate
  std::string client_ca_file;  // --tls_client_ca_file: PEM CA bundle; set: mutual TLS
  // How often gRPC looks whether the files changed (whole seconds, at least 1).
  absl::Duration refresh_interval = absl::Minutes(1);
  TlsFlagNames flags;  // the public port's by default; the cluster's for worker ports

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// InvalidArgument naming the flag when the options are inconsistent, a file cannot be read,
// is not PEM of the right kind, or the key does not belong to the certificate.
absl::Status CheckServerTls(const ServerTlsOptions& options);

// CheckServerTls, then the credentials: InsecureServerCredentials when TLS is off.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_SERVER_TLS_H_
