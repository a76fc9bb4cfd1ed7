// The security flags of tpserve-cli and tpserve-bench, defined once: --tls_ca_file,
// --tls_cert_file, --tls_key_file and --api_key (default: the TPSERVE_API_KEY environment
// variable). Read once, in main, after absl::ParseCommandLine.
#ifndef TPSERVE_CLIENTS_CPP_SECURITY_FLAGS_H_
#define TPSERVE_CLIENTS_CPP_SECURITY_FLAGS_H_

#include "clients/cpp/client_credentials.h"

namespace tpserve::client {

// The flags' values; api_key falls back to $TPSERVE_API_KEY when --api_key is not given.
ClientSecurityOptions ClientSecurityFromFlags();

}  // namespace tpserve::client

#endif  // TPSERVE_CLIENTS_CPP_SECURITY_FLAGS_H_
