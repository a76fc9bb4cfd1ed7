// ClientCredentials: how tpserve-cli and tpserve-bench reach a server — the channel
// credentials (plaintext, TLS verifying the server against a CA, or mutual TLS with a client
// certificate) and the API key sent as "authorization: Bearer KEY" on every call. Made once
// from ClientSecurityOptions; immutable, shareable between channels and threads.
#ifndef TPSERVE_CLIENTS_CPP_CLIENT_CREDENTIALS_H_
#define TPSERVE_CLIENTS_CPP_CLIENT_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"

namespace tpserve::client {

struct ClientSecurityOptions {
  std::string ca_file;    // --tls_ca_file: PEM CA bundle to verify the server (empty: system's)
  std::string cert_file;  // --tls_cert_file: PEM client certificate chain (mutual TLS)
  std::string key_file;   // --tls_key_file: PEM private key of cert_file
  std::string api_key;    // --api_key (or $TPSERVE_API_KEY); empty: none sent
  // TLS when any of the files is given; plaintext otherwise.
  bool tls() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

struct ClientCredentials {
  std::shared_ptr<grpc::ChannelCredentials> channel = grpc::InsecureChannelCredentials();
  std::string api_key;  // empty: no authorization metadata
};

// InvalidArgument naming the flag when a file cannot be read or a certificate comes without
// its key (or the other way round).
absl::StatusOr<ClientCredentials> MakeClientCredentials(const ClientSecurityOptions& options);

}  // namespace tpserve::client

#endif  // TPSERVE_CLIENTS_CPP_CLIENT_CREDENTIALS_H_
