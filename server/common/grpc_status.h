// The one mapping from tpserve's absl::Status to the gRPC status a client sees. Codes map
// one to one; UNKNOWN never leaves the server (it becomes INTERNAL). Stateless.
#ifndef TPSERVE_SERVER_COMMON_GRPC_STATUS_H_
#define TPSERVE_SERVER_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tpserve {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_GRPC_STATUS_H_
