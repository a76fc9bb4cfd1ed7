// Owning pointers for the OpenSSL objects tpserve makes or parses: each frees its object with
// OpenSSL's own free function.
#ifndef TPSERVE_SERVER_COMMON_OPENSSL_PTR_H_
#define TPSERVE_SERVER_COMMON_OPENSSL_PTR_H_

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

namespace tpserve::openssl {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct ExtFree {
  void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Ext = std::unique_ptr<X509_EXTENSION, ExtFree>;

}  // namespace tpserve::openssl

#endif  // TPSERVE_SERVER_COMMON_OPENSSL_PTR_H_
