#include "server/common/ephemeral_ca.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/openssl_ptr.h"

namespace tpserve {
namespace {

using openssl::Bio;
using openssl::Cert;
using openssl::Ext;
using openssl::Pkey;

// The reason of OpenSSL's last error, and the queue cleared.
std::string OpensslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown OpenSSL error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

absl::Status Failed(const char* what) {
  return absl::InternalError(absl::StrCat("ephemeral CA: ", what, ": ", OpensslError()));
}

absl::StatusOr<Pkey> NewP256Key() {
  Pkey key(EVP_EC_gen("P-256"));
  if (key == nullptr) return Failed("EC P-256 key generation");
  return key;
}

// A certificate for `subject_cn` holding `key`'s public half, before extensions and signing:
// version 3, a random 127-bit serial, valid from five minutes ago to `not_after_s` from now.
absl::StatusOr<Cert> NewCertificate(const std::string& subject_cn, EVP_PKEY* key,
                                    long not_after_s) {
  Cert cert(X509_new());
  if (cert == nullptr || X509_set_version(cert.get(), 2) != 1) return Failed("X509_new");
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial(BN_new(), BN_free);
  if (serial == nullptr || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return Failed("serial number");
  }
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -300) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), not_after_s) == nullptr) {
    return Failed("validity");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(subject_cn.c_str()), -1, -1,
                                 0) != 1) {
    return Failed("subject name");
  }
  if (X509_set_pubkey(cert.get(), key) != 1) return Failed("public key");
  return cert;
}

// Adds the extension `nid` = `value` (OpenSSL's configuration syntax), issued by `issuer`.
absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Ext ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (ext == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("ephemeral CA: bad ", OBJ_nid2sn(nid), " value '", value, "'"));
  }
  if (X509_add_ext(cert, ext.get(), -1) != 1) return Failed("X509_add_ext");
  return absl::OkStatus();
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1) return Failed("PEM certificate");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Failed("PEM private key");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

}  // namespace

struct EphemeralCa::Impl {
  Pkey key;   // the CA's private key: never serialised
  Cert cert;  // its self-signed certificate
  long validity_s = 0;
};

EphemeralCa::EphemeralCa(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EphemeralCa::~EphemeralCa() = default;

absl::StatusOr<std::unique_ptr<EphemeralCa>> EphemeralCa::Create(const std::string& common_name,
                                                                 absl::Duration validity) {
  if (validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("ephemeral CA: validity must be positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->validity_s = static_cast<long>(absl::ToInt64Seconds(validity));
  absl::StatusOr<Pkey> key = NewP256Key();
  if (!key.ok()) return key.status();
  impl->key = *std::move(key);
  absl::StatusOr<Cert> cert = NewCertificate(common_name, impl->key.get(), impl->validity_s);
  if (!cert.ok()) return cert.status();
  impl->cert = *std::move(cert);
  X509* c = impl->cert.get();
  if (X509_set_issuer_name(c, X509_get_subject_name(c)) != 1) return Failed("issuer name");
  for (const auto& [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                   std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                                   std::pair{NID_subject_key_identifier, "hash"}}) {
    if (absl::Status added = AddExtension(c, c, nid, value); !added.ok()) return added;
  }
  if (X509_sign(c, impl->key.get(), EVP_sha256()) == 0) return Failed("signing the CA");
  absl::StatusOr<std::string> pem = CertPem(c);
  if (!pem.ok()) return pem.status();
  std::unique_ptr<EphemeralCa> ca(new EphemeralCa(std::move(impl)));
  ca->cert_pem_ = *std::move(pem);
  return ca;
}

absl::StatusOr<PemKeyPair> EphemeralCa::Issue(const std::string& common_name,
                                              const std::vector<std::string>& dns_names,
                                              const std::vector<std::string>& ip_addresses) const {
  absl::StatusOr<Pkey> key = NewP256Key();
  if (!key.ok()) return key.status();
  absl::StatusOr<Cert> cert = NewCertificate(common_name, key->get(), impl_->validity_s);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(impl_->cert.get())) != 1) {
    return Failed("issuer name");
  }
  std::vector<std::string> sans;
  for (const std::string& dns : dns_names) {
    if (dns.find_first_of(",:") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("ephemeral CA: bad DNS name '", dns, "'"));
    }
    sans.push_back(absl::StrCat("DNS:", dns));
  }
  for (const std::string& ip : ip_addresses) {
    if (ip.find(',') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("ephemeral CA: bad IP address '", ip, "'"));
    }
    sans.push_back(absl::StrCat("IP:", ip));
  }
  std::vector<std::pair<int, std::string>> extensions = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature"},
      {NID_ext_key_usage, "serverAuth,clientAuth"},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid:always"}};
  if (!sans.empty()) extensions.emplace_back(NID_subject_alt_name, absl::StrJoin(sans, ","));
  for (const auto& [nid, value] : extensions) {
    if (absl::Status added = AddExtension(c, impl_->cert.get(), nid, value); !added.ok()) {
      return added;
    }
  }
  if (X509_sign(c, impl_->key.get(), EVP_sha256()) == 0) return Failed("signing a certificate");
  PemKeyPair pair;
  absl::StatusOr<std::string> cert_pem = CertPem(c);
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = KeyPem(key->get());
  if (!key_pem.ok()) return key_pem.status();
  pair.cert = *std::move(cert_pem);
  pair.key = *std::move(key_pem);
  return pair;
}

}  // namespace tpserve
