#include "server/common/server_tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "server/common/openssl_ptr.h"
#include "server/common/pem_file.h"

namespace tpserve {
namespace {

using openssl::Bio;
using openssl::Cert;
using openssl::Pkey;

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of a PEM file, or InvalidArgument naming the flag.
absl::StatusOr<Cert> FirstCertificate(const char* flag, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadPemFile(flag, path);
  if (!pem.ok()) return pem.status();
  Bio bio = MemoryBio(*pem);
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " holds no PEM certificate (BEGIN CERTIFICATE)"));
  }
  return cert;
}

absl::Status CheckKeyPair(const ServerTlsOptions& o) {
  absl::StatusOr<Cert> cert = FirstCertificate(o.flags.cert, o.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> pem = ReadPemFile(o.flags.key, o.key_file);
  if (!pem.ok()) return pem.status();
  Bio bio = MemoryBio(*pem);
  Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.flags.key, ": ", o.key_file,
                     " holds no unencrypted PEM private key (BEGIN PRIVATE KEY)"));
  }
  const bool match = X509_check_private_key(cert->get(), key.get()) == 1;
  ERR_clear_error();
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat(
        o.flags.key, ": ", o.key_file, " is not the key of ", o.flags.cert, " ", o.cert_file));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckServerTls(const ServerTlsOptions& o) {
  if (!o.enabled()) {
    if (!o.client_ca_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(o.flags.client_ca, " needs TLS: give ",
                                                     o.flags.cert, " and ", o.flags.key, " too"));
    }
    return absl::OkStatus();
  }
  if (o.cert_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.flags.key, " is given without ", o.flags.cert));
  }
  if (o.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.flags.cert, " is given without ", o.flags.key));
  }
  if (o.refresh_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError("--tls_refresh_interval_s must be >= 1");
  }
  if (absl::Status pair = CheckKeyPair(o); !pair.ok()) return pair;
  if (!o.client_ca_file.empty()) {
    absl::StatusOr<Cert> ca = FirstCertificate(o.flags.client_ca, o.client_ca_file);
    if (!ca.ok()) return ca.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& o) {
  if (absl::Status checked = CheckServerTls(o); !checked.ok()) return checked;
  if (!o.enabled()) return grpc::InsecureServerCredentials();
  const auto refresh_s =
      static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(o.refresh_interval)));
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      o.key_file, o.cert_file, o.client_ca_file, refresh_s);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (o.client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace tpserve
