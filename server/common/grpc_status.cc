#include "server/common/grpc_status.h"

#include <string>

namespace tpserve {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  auto code = static_cast<grpc::StatusCode>(status.code());
  if (status.code() == absl::StatusCode::kUnknown) code = grpc::StatusCode::INTERNAL;
  const std::string message(status.message());
  return grpc::Status(code, message);
}

}  // namespace tpserve
