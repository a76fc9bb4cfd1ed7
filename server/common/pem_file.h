// ReadPemFile: the whole text of a credentials file a flag names, for the TLS set-ups of the
// public port and of the cluster.
#ifndef TPSERVE_SERVER_COMMON_PEM_FILE_H_
#define TPSERVE_SERVER_COMMON_PEM_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace tpserve {

// The file's bytes; InvalidArgument "<flag>: cannot read <path>" when it cannot be read.
absl::StatusOr<std::string> ReadPemFile(const char* flag, const std::string& path);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_PEM_FILE_H_
