#include "server/common/ephemeral_ca.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

#include "absl/time/clock.h"

namespace tpserve {
namespace {

std::unique_ptr<X509, decltype(&X509_free)> ParseCert(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), pem.size()), BIO_free);
  return {PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), X509_free};
}

std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> ParseKey(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), pem.size()), BIO_free);
  return {PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free};
}

// X509_verify_cert of `leaf` against `ca` alone, for TLS `purpose`; the error code.
int Verify(X509* ca, X509* leaf, int purpose) {
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  X509_STORE_add_cert(store.get(), ca);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      X509_STORE_CTX_free);
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf, nullptr);
  X509_STORE_CTX_set_purpose(ctx.get(), purpose);
  const int ok = X509_verify_cert(ctx.get());
  const int error = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  return ok == 1 ? X509_V_OK : (error == X509_V_OK ? -1 : error);
}

TEST(EphemeralCa, IssuesP256LeavesThatChainToItForServerAndClientAuth) {
  absl::StatusOr<std::unique_ptr<EphemeralCa>> ca = EphemeralCa::Create("test CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok()) << ca.status();
  absl::StatusOr<PemKeyPair> leaf = (*ca)->Issue("worker", {"localhost"}, {"127.0.0.1", "::1"});
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  auto ca_cert = ParseCert((*ca)->cert_pem());
  auto cert = ParseCert(leaf->cert);
  auto key = ParseKey(leaf->key);
  ASSERT_NE(ca_cert, nullptr);
  ASSERT_NE(cert, nullptr);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1);
  EXPECT_TRUE(EVP_PKEY_is_a(key.get(), "EC"));
  EXPECT_EQ(EVP_PKEY_get_bits(key.get()), 256);
  EXPECT_EQ(X509_check_ca(ca_cert.get()), 1);
  EXPECT_EQ(X509_check_ca(cert.get()), 0);
  EXPECT_EQ(Verify(ca_cert.get(), cert.get(), X509_PURPOSE_SSL_SERVER), X509_V_OK);
  EXPECT_EQ(Verify(ca_cert.get(), cert.get(), X509_PURPOSE_SSL_CLIENT), X509_V_OK);
  // The subjectAltNames, and nothing else matches.
  EXPECT_EQ(X509_check_host(cert.get(), "localhost", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "::1", 0), 1);
  EXPECT_EQ(X509_check_host(cert.get(), "example.com", 0, 0, nullptr), 0);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "10.0.0.1", 0), 0);
}

TEST(EphemeralCa, ValidityIsShortAndStartsBeforeNow) {
  absl::StatusOr<std::unique_ptr<EphemeralCa>> ca = EphemeralCa::Create("test CA", absl::Hours(2));
  ASSERT_TRUE(ca.ok()) << ca.status();
  absl::StatusOr<PemKeyPair> leaf = (*ca)->Issue("worker", {}, {"127.0.0.1"});
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  for (const std::string& pem : {(*ca)->cert_pem(), leaf->cert}) {
    auto cert = ParseCert(pem);
    ASSERT_NE(cert, nullptr);
    const time_t now = absl::ToTimeT(absl::Now());
    time_t t = now;
    EXPECT_LT(X509_cmp_time(X509_get0_notBefore(cert.get()), &t), 0);
    t = now + 3600;  // valid in one hour
    EXPECT_GT(X509_cmp_time(X509_get0_notAfter(cert.get()), &t), 0);
    t = now + 3 * 3600;  // not in three
    EXPECT_LT(X509_cmp_time(X509_get0_notAfter(cert.get()), &t), 0);
  }
}

TEST(EphemeralCa, AnotherCaDoesNotVerifyItsLeaves) {
  auto ca = EphemeralCa::Create("one", absl::Hours(1));
  auto other = EphemeralCa::Create("other", absl::Hours(1));
  ASSERT_TRUE(ca.ok() && other.ok());
  absl::StatusOr<PemKeyPair> leaf = (*ca)->Issue("worker", {"localhost"}, {});
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  auto other_cert = ParseCert((*other)->cert_pem());
  auto cert = ParseCert(leaf->cert);
  EXPECT_NE(Verify(other_cert.get(), cert.get(), X509_PURPOSE_SSL_CLIENT), X509_V_OK);
}

TEST(EphemeralCa, RefusesBadNames) {
  auto ca = EphemeralCa::Create("ca", absl::Hours(1));
  ASSERT_TRUE(ca.ok());
  EXPECT_EQ((*ca)->Issue("w", {}, {"not-an-ip"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*ca)->Issue("w", {"a,DNS:b"}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EphemeralCa::Create("ca", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
