#include "clients/cpp/generation_client.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/generic/generic_stub.h"

namespace tpserve::client {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace

std::string Describe(const grpc::Status& status) {
  return absl::StrCat(CodeName(status.error_code()), ": ", status.error_message());
}

GenerationClient::GenerationClient(const std::string& server, absl::Duration timeout,
                                   const ClientCredentials& credentials)
    : channel_(grpc::CreateChannel(server, credentials.channel)),
      stub_(tpserve::v1::Generation::NewStub(channel_)),
      timeout_(timeout),
      api_key_(credentials.api_key) {}

void GenerationClient::Prepare(grpc::ClientContext* context) const {
  if (timeout_ > absl::ZeroDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  }
  // Metadata, not call credentials: gRPC sends those only over TLS, and a key may also guard
  // a plaintext port behind a TLS-terminating proxy.
  if (!api_key_.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", api_key_));
}

grpc::Status GenerationClient::Generate(
    const tpserve::v1::GenerateRequest& request,
    const std::function<void(const tpserve::v1::GenerateResponse&)>& on_message) {
  grpc::ClientContext context;
  Prepare(&context);
  {
    absl::MutexLock lock(&mu_);
    streaming_ = &context;
    cancel_requested_ = false;
  }
  std::unique_ptr<grpc::ClientReader<tpserve::v1::GenerateResponse>> reader =
      stub_->Generate(&context, request);
  tpserve::v1::GenerateResponse message;
  while (reader->Read(&message)) on_message(message);
  grpc::Status status = reader->Finish();
  absl::MutexLock lock(&mu_);
  streaming_ = nullptr;
  return status;
}

void GenerationClient::Cancel() {
  absl::MutexLock lock(&mu_);
  cancel_requested_ = true;
  if (streaming_ != nullptr) streaming_->TryCancel();
}

grpc::Status GenerationClient::Tokenize(const tpserve::v1::TokenizeRequest& request,
                                        tpserve::v1::TokenizeResponse* response) {
  grpc::ClientContext context;
  Prepare(&context);
  return stub_->Tokenize(&context, request, response);
}

grpc::Status GenerationClient::GetModelInfo(tpserve::v1::ModelInfo* info) {
  grpc::ClientContext context;
  Prepare(&context);
  return stub_->GetModelInfo(&context, tpserve::v1::GetModelInfoRequest(), info);
}

grpc::Status GenerationClient::Health() {
  // grpc.health.v1.HealthCheckRequest{} is empty; the response's field 1 is the status
  // (1 = SERVING). Spoken as raw bytes: the health proto's C++ stubs are not installed.
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  Prepare(&context);
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);  // an empty HealthCheckRequest (service "")
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  done.WaitForNotification();
  if (!status.ok()) return status;
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  if (bytes.size() == 2 && bytes[0] == 0x08 && bytes[1] == 0x01) return grpc::Status::OK;
  const int serving = bytes.size() == 2 ? bytes[1] : 0;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      serving == 2 ? "NOT_SERVING" : absl::StrCat("health status ", serving));
}

}  // namespace tpserve::client
