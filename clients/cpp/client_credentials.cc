#include "clients/cpp/client_credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tpserve::client {
namespace {

absl::StatusOr<std::string> ReadFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  return text.str();
}

}  // namespace

absl::StatusOr<ClientCredentials> MakeClientCredentials(const ClientSecurityOptions& o) {
  ClientCredentials credentials;
  credentials.api_key = o.api_key;
  if (!o.tls()) return credentials;
  if (o.cert_file.empty() != o.key_file.empty()) {
    return absl::InvalidArgumentError(o.cert_file.empty()
                                          ? "--tls_key_file is given without --tls_cert_file"
                                          : "--tls_cert_file is given without --tls_key_file");
  }
  grpc::SslCredentialsOptions ssl;
  if (!o.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadFile("--tls_ca_file", o.ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!o.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadFile("--tls_cert_file", o.cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile("--tls_key_file", o.key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  credentials.channel = grpc::SslCredentials(ssl);
  return credentials;
}

}  // namespace tpserve::client
