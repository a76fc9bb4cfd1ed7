// File: server/common/ephemeral_ca.h
//
// EphemeralCa: a certificate authority that lives only in this process's memory, for the
// mutual TLS between `tpserve serve` and its local workers. Create() makes a fresh EC P-256
// key and a self-signed CA certificate; Issue() makes a leaf key and certificate signed by
// it (EC P-256, SANs as given, usable for TLS client and server authentication). The CA's
// private key is never serialised: only certificates and leaf keys leave as PEM text. Each
// `serve` start makes a new one, so nothing issued outlives the process that trusts it.
// Immutable after Create(); thread-safe.
#ifndef TPSERVE_SERVER_COMMON_EPHEMERAL_CA_H_
#define TPSERVE_SERVER_COMMON_EPHEMERAL_CA_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tpserve {

// A PEM certificate and its PEM (PKCS#8, unencrypted) private key.
struct PemKeyPair {
  std::string cert;
  std::string key;
};

class EphemeralCa {
 public:
  // A new CA key and self-signed certificate named `common_name`, valid from five minutes
  // ago (clock skew between processes is nil, but certificates are checked to the second)
  // until `validity` from now. Internal on an OpenSSL failure.
  static absl::StatusOr<std::unique_ptr<EphemeralCa>> Create(const std::string& common_name,
                                                             absl::Duration validity);
  ~EphemeralCa();
  EphemeralCa(const EphemeralCa&) = delete;
  EphemeralCa& operator=(const EphemeralCa&) = delete;

  // The CA certificate (PEM), the trust anchor of both sides.
  const std::string& cert_pem() const { return cert_pem_; }

  // A new leaf key and certificate for `common_name` with subjectAltNames `dns_names` and
  // `ip_addresses` (dotted IPv4 or IPv6 text), extended key usage serverAuth and clientAuth,
  // valid as long as the CA. InvalidArgument for an address that does not parse.
  absl::StatusOr<PemKeyPair> Issue(const std::string& common_name,
                                   const std::vector<std::string>& dns_names,
                                   const std::vector<std::string>& ip_addresses) const;

 private:
  struct Impl;
  explicit EphemeralCa(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string cert_pem_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_EPHEMERAL_CA_H_
