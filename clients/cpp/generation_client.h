// GenerationClient: a blocking C++ client of tpserve.v1.Generation and grpc.health.v1 over
// one channel, shared by tpserve-cli and tpserve-bench. Generate streams each message to a
// callback; Cancel() (from any thread) cancels the stream in flight. One Generate at a time
// per client object; the unary calls are thread-safe.
#ifndef TPSERVE_CLIENTS_CPP_GENERATION_CLIENT_H_
#define TPSERVE_CLIENTS_CPP_GENERATION_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "clients/cpp/client_credentials.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/v1/generate.grpc.pb.h"

namespace tpserve::client {

class GenerationClient {
 public:
  // `timeout` bounds every call (ZeroDuration: none); `credentials` make the channel and give
  // the API key sent with every call (default: plaintext, no key).
  GenerationClient(const std::string& server, absl::Duration timeout,
                   const ClientCredentials& credentials = {});

  // Streams `request`; `on_message` sees every message in order. Returns the call's status.
  grpc::Status Generate(const tpserve::v1::GenerateRequest& request,
                        const std::function<void(const tpserve::v1::GenerateResponse&)>& on_message)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the Generate in flight, if any.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  grpc::Status Tokenize(const tpserve::v1::TokenizeRequest& request,
                        tpserve::v1::TokenizeResponse* response);
  grpc::Status GetModelInfo(tpserve::v1::ModelInfo* info);
  // grpc.health.v1 Check of the whole server: SERVING → OK, else the status or a
  // FAILED_PRECONDITION naming the serving status.
  grpc::Status Health();

 private:
  // The call's deadline and API key.
  void Prepare(grpc::ClientContext* context) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tpserve::v1::Generation::Stub> stub_;
  const absl::Duration timeout_;
  const std::string api_key_;
  absl::Mutex mu_;
  grpc::ClientContext* streaming_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancel_requested_ ABSL_GUARDED_BY(mu_) = false;
};

// "CODE: message" for a failed status.
std::string Describe(const grpc::Status& status);

}  // namespace tpserve::client

#endif  // TPSERVE_CLIENTS_CPP_GENERATION_CLIENT_H_
