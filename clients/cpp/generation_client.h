// GenerationClient: a blocking C++ client of tpserve.v1.Generation and grpc.health.v1 over
// one channel, shared by tpserve-cli and tpserve-bench. Generate streams each message to a
// callback and, when the stream breaks before its final message (StreamResume), resends the
// request with what arrived so far, so that the callback sees one uninterrupted stream;
// Cancel() (from any thread) cancels the stream in flight or the wait before a resend. One
// Generate at a time per client object; the unary calls are thread-safe.
#ifndef TPSERVE_CLIENTS_CPP_GENERATION_CLIENT_H_
#define TPSERVE_CLIENTS_CPP_GENERATION_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "clients/cpp/client_credentials.h"
#include "clients/cpp/stream_resume.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/v1/generate.grpc.pb.h"

namespace tpserve::client {

class GenerationClient {
 public:
  using OnMessage = std::function<void(const tpserve::v1::GenerateResponse&)>;
  // Told of each resend: the token ids received so far and the status the stream broke with.
  using OnResume = std::function<void(int64_t tokens_received, const grpc::Status& broken)>;

  // `timeout` bounds every call, a Generate with all its resends included (ZeroDuration:
  // none); `credentials` make the channel and give the API key sent with every call (default:
  // plaintext, no key); `resume` bounds the resends of a broken Generate stream (max_resumes
  // 0: none). The channel reconnects within resume.max_backoff of a server coming back.
  GenerationClient(const std::string& server, absl::Duration timeout,
                   const ClientCredentials& credentials = {}, const ResumePolicy& resume = {});

  // Streams `request`; `on_message` sees every message in order, those of resent streams
  // continuing those of the broken ones; `on_resume` (may be empty) hears of each resend.
  // Returns the status of the last stream.
  grpc::Status Generate(const tpserve::v1::GenerateRequest& request, const OnMessage& on_message,
                        const OnResume& on_resume = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the Generate in flight, if any.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  grpc::Status Tokenize(const tpserve::v1::TokenizeRequest& request,
                        tpserve::v1::TokenizeResponse* response);
  grpc::Status GetModelInfo(tpserve::v1::ModelInfo* info);
  // grpc.health.v1 Check of the whole server: SERVING → OK, else the status or a
  // FAILED_PRECONDITION naming the serving status.
  grpc::Status Health();

 private:
  // Now + timeout, or InfiniteFuture without a timeout.
  absl::Time Deadline() const;
  // The call's deadline (none when infinite) and API key.
  void Prepare(grpc::ClientContext* context, absl::Time deadline) const;
  // One Generate stream of a logical call, until `deadline`.
  grpc::Status StreamOnce(const tpserve::v1::GenerateRequest& request, absl::Time deadline,
                          const OnMessage& on_message) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether Cancel() was called during this Generate.
  bool CancelRequested() ABSL_LOCKS_EXCLUDED(mu_);
  // Sleeps `wait` unless Cancel() comes first; false when it did.
  bool SleepUnlessCancelled(absl::Duration wait) ABSL_LOCKS_EXCLUDED(mu_);
  // Before a resend: sleeps `wait`, then waits up to `wait` more (not past `deadline`) for
  // the channel to be READY. False when Cancel() came first.
  bool AwaitResend(absl::Duration wait, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tpserve::v1::Generation::Stub> stub_;
  const absl::Duration timeout_;
  const std::string api_key_;
  const ResumePolicy resume_;
  absl::Mutex mu_;
  grpc::ClientContext* streaming_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancel_requested_ ABSL_GUARDED_BY(mu_) = false;
};

// "CODE: message" for a failed status.
std::string Describe(const grpc::Status& status);

}  // namespace tpserve::client

#endif  // TPSERVE_CLIENTS_CPP_GENERATION_CLIENT_H_
