#include "clients/cpp/generation_client.h"

#include <algorithm>
#include <optional>
#include <random>
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

namespace {

// Channel arguments that let the channel reconnect as often as resume.max_backoff: without
// them it waits up to two minutes (gRPC's default) before trying a restarted server again.
grpc::ChannelArguments ReconnectArguments(const ResumePolicy& resume) {
  grpc::ChannelArguments args;
  const auto ms = [](absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); };
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, ms(resume.initial_backoff));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, ms(resume.initial_backoff));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, ms(resume.max_backoff));
  return args;
}

}  // namespace

GenerationClient::GenerationClient(const std::string& server, absl::Duration timeout,
                                   const ClientCredentials& credentials, const ResumePolicy& resume)
    : channel_(grpc::CreateCustomChannel(server, credentials.channel, ReconnectArguments(resume))),
      stub_(tpserve::v1::Generation::NewStub(channel_)),
      timeout_(timeout),
      api_key_(credentials.api_key),
      resume_(resume) {}

absl::Time GenerationClient::Deadline() const {
  return timeout_ > absl::ZeroDuration() ? absl::Now() + timeout_ : absl::InfiniteFuture();
}

void GenerationClient::Prepare(grpc::ClientContext* context, absl::Time deadline) const {
  if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
  // Metadata, not call credentials: gRPC sends those only over TLS, and a key may also guard
  // a plaintext port behind a TLS-terminating proxy.
  if (!api_key_.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", api_key_));
}

grpc::Status GenerationClient::Generate(const tpserve::v1::GenerateRequest& request,
                                        const OnMessage& on_message, const OnResume& on_resume) {
  const absl::Time deadline = Deadline();
  {
    absl::MutexLock lock(&mu_);
    cancel_requested_ = false;
  }
  StreamResume resume(request, resume_);
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.0, 1.0);
  while (true) {
    grpc::Status status =
        StreamOnce(resume.Next(), deadline, [&](const tpserve::v1::GenerateResponse& m) {
          resume.Observe(m);
          on_message(m);
        });
    const std::optional<absl::Duration> wait =
        resume.NextResume(status, CancelRequested(), absl::Now(), deadline, jitter(rng));
    if (!wait.has_value()) return status;
    if (on_resume) on_resume(resume.tokens_received(), status);
    if (!AwaitResend(*wait, deadline)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while resuming the stream");
    }
  }
}

bool GenerationClient::AwaitResend(absl::Duration wait, absl::Time deadline) {
  if (!SleepUnlessCancelled(wait)) return false;
  // A call on a channel in TRANSIENT_FAILURE fails at once, even while it reconnects to a
  // server that is back: give it up to `wait` more to become READY.
  const absl::Time until = std::min(absl::Now() + wait, deadline);
  grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY && absl::Now() < until) {
    if (CancelRequested()) return false;
    channel_->WaitForStateChange(
        state, absl::ToChronoTime(std::min(until, absl::Now() + absl::Milliseconds(50))));
    state = channel_->GetState(/*try_to_connect=*/true);
  }
  return !CancelRequested();
}

grpc::Status GenerationClient::StreamOnce(const tpserve::v1::GenerateRequest& request,
                                          absl::Time deadline, const OnMessage& on_message) {
  grpc::ClientContext context;
  Prepare(&context, deadline);
  {
    absl::MutexLock lock(&mu_);
    if (cancel_requested_) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    streaming_ = &context;
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

bool GenerationClient::CancelRequested() {
  absl::MutexLock lock(&mu_);
  return cancel_requested_;
}

bool GenerationClient::SleepUnlessCancelled(absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&cancel_requested_), wait);
  return !cancel_requested_;
}

void GenerationClient::Cancel() {
  absl::MutexLock lock(&mu_);
  cancel_requested_ = true;
  if (streaming_ != nullptr) streaming_->TryCancel();
}

grpc::Status GenerationClient::Tokenize(const tpserve::v1::TokenizeRequest& request,
                                        tpserve::v1::TokenizeResponse* response) {
  grpc::ClientContext context;
  Prepare(&context, Deadline());
  return stub_->Tokenize(&context, request, response);
}

grpc::Status GenerationClient::GetModelInfo(tpserve::v1::ModelInfo* info) {
  grpc::ClientContext context;
  Prepare(&context, Deadline());
  return stub_->GetModelInfo(&context, tpserve::v1::GetModelInfoRequest(), info);
}

grpc::Status GenerationClient::Health() {
  // grpc.health.v1.HealthCheckRequest{} is empty; the response's field 1 is the status
  // (1 = SERVING). Spoken as raw bytes: the health proto's C++ stubs are not installed.
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  Prepare(&context, Deadline());
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
