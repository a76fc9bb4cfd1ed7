#include "clients/cpp/security_flags.h"

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle that signed the server's certificate; any --tls_* flag turns TLS on "
          "(without this one, the system's CAs)");
ABSL_FLAG(std::string, tls_cert_file, "", "PEM client certificate, for servers asking for one");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, api_key, "",
          "API key sent as 'authorization: Bearer KEY' (default: $TPSERVE_API_KEY)");

namespace tpserve::client {

ClientSecurityOptions ClientSecurityFromFlags() {
  ClientSecurityOptions o;
  o.ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  o.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  o.key_file = absl::GetFlag(FLAGS_tls_key_file);
  o.api_key = absl::GetFlag(FLAGS_api_key);
  if (o.api_key.empty()) {
    if (const char* env = std::getenv("TPSERVE_API_KEY"); env != nullptr) o.api_key = env;
  }
  return o;
}

}  // namespace tpserve::client
