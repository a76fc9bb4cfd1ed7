#include "server/common/cluster_tls.h"

#include <arpa/inet.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/common/pem_file.h"

namespace tpserve {
namespace {

ServerTlsOptions AsServerTls(const ClusterTlsOptions& o) {
  ServerTlsOptions s;
  s.cert_file = o.cert_file;
  s.key_file = o.key_file;
  s.client_ca_file = o.ca_file;
  s.flags.cert = "--cluster_cert_file";
  s.flags.key = "--cluster_key_file";
  s.flags.client_ca = "--cluster_ca_file";
  return s;
}

bool IsLoopbackHost(std::string host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace

absl::Status CheckClusterTls(const ClusterTlsOptions& o) {
  if (!o.enabled()) return absl::OkStatus();
  if (o.ca_file.empty() || o.cert_file.empty() || o.key_file.empty()) {
    return absl::InvalidArgumentError(
        "cluster TLS needs all three of --cluster_ca_file, --cluster_cert_file and "
        "--cluster_key_file");
  }
  return CheckServerTls(AsServerTls(o));
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeClusterServerCredentials(
    const ClusterTlsOptions& o) {
  if (absl::Status checked = CheckClusterTls(o); !checked.ok()) return checked;
  return MakeServerCredentials(AsServerTls(o));
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeClusterChannelCredentials(
    const ClusterTlsOptions& o) {
  if (absl::Status checked = CheckClusterTls(o); !checked.ok()) return checked;
  if (!o.enabled()) return grpc::InsecureChannelCredentials();
  ClusterTlsPem pem;
  absl::StatusOr<std::string> ca = ReadPemFile("--cluster_ca_file", o.ca_file);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> cert = ReadPemFile("--cluster_cert_file", o.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile("--cluster_key_file", o.key_file);
  if (!key.ok()) return key.status();
  pem.ca_cert = *std::move(ca);
  pem.cert = *std::move(cert);
  pem.key = *std::move(key);
  return MakeClusterChannelCredentials(pem);
}

std::shared_ptr<grpc::ChannelCredentials> MakeClusterChannelCredentials(const ClusterTlsPem& pem) {
  // gRPC's SSL credentials verify the chain against pem_root_certs only (not the system's)
  // and the certificate's subjectAltNames against the host of the dialled address.
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.ca_cert;
  ssl.pem_cert_chain = pem.cert;
  ssl.pem_private_key = pem.key;
  return grpc::SslCredentials(ssl);
}

std::string ClusterListenAddress(const std::string& listen, bool credentials,
                                 bool insecure_cluster) {
  if (credentials || insecure_cluster) return listen;
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return listen;  // gRPC reports the bad address
  if (IsLoopbackHost(listen.substr(0, colon))) return listen;
  return absl::StrCat("127.0.0.1", listen.substr(colon));
}

}  // namespace tpserve
