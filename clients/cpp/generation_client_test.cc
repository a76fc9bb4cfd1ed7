// GenerationClient's resends against an in-process fake Generation service that breaks its
// streams on cue: the caller sees one stream, the resend carries what arrived, a wrong
// request is not resent, and Cancel() ends the wait before a resend.
#include "clients/cpp/generation_client.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"

namespace tpserve::client {
namespace {

using tpserve::v1::GenerateRequest;
using tpserve::v1::GenerateResponse;

// One scripted stream: the token ids of each message to send, then the status to end with
// (OK: the last message is final).
struct Script {
  std::vector<std::vector<int32_t>> messages;
  grpc::Status end;
};

// Plays one Script per call, in order, and records every request it got. Past the scripts:
// UNAVAILABLE with nothing sent.
class FakeGeneration final : public tpserve::v1::Generation::Service {
 public:
  explicit FakeGeneration(std::vector<Script> scripts) : scripts_(std::move(scripts)) {}

  grpc::Status Generate(grpc::ServerContext*, const GenerateRequest* request,
                        grpc::ServerWriter<GenerateResponse>* writer) override {
    Script script;
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(*request);
      if (requests_.size() > scripts_.size()) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no more scripts");
      }
      script = scripts_[requests_.size() - 1];
    }
    for (size_t i = 0; i < script.messages.size(); ++i) {
      GenerateResponse m;
      for (int32_t id : script.messages[i]) m.add_token_ids(id);
      m.set_text(absl::StrCat("<", script.messages[i].empty() ? 0 : script.messages[i][0], ">"));
      m.set_request_id(request->request_id().empty() ? "fake-1" : request->request_id());
      if (i == 0) m.set_seed(request->resume().has_seed() ? request->resume().seed() : 99);
      if (script.end.ok() && i + 1 == script.messages.size()) {
        m.set_finish_reason(tpserve::v1::FINISH_REASON_LENGTH);
      }
      writer->Write(m);
    }
    return script.end;
  }

  std::vector<GenerateRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

 private:
  const std::vector<Script> scripts_;
  absl::Mutex mu_;
  std::vector<GenerateRequest> requests_ ABSL_GUARDED_BY(mu_);
};

class GenerationClientTest : public testing::Test {
 protected:
  void Start(std::vector<Script> scripts) {
    fake_ = std::make_unique<FakeGeneration>(std::move(scripts));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(fake_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }

  static ResumePolicy Quick() {
    ResumePolicy policy;
    policy.initial_backoff = absl::Milliseconds(1);
    policy.max_backoff = absl::Milliseconds(4);
    return policy;
  }

  std::unique_ptr<FakeGeneration> fake_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

GenerateRequest Greedy() {
  GenerateRequest r;
  r.set_prompt("hi");
  r.set_max_tokens(8);
  r.set_temperature(0);
  return r;
}

const grpc::Status kReset(grpc::StatusCode::UNAVAILABLE, "Connection reset by peer");

TEST_F(GenerationClientTest, TheCallerSeesOneStreamAcrossBreaks) {
  Start({{{{1}, {2, 3}}, kReset}, {{}, kReset}, {{{4}, {5}}, grpc::Status::OK}});
  GenerationClient client(address_, absl::Seconds(30), {}, Quick());
  std::vector<int32_t> ids;
  std::string text;
  std::vector<int64_t> resumed_after;
  const grpc::Status status = client.Generate(
      Greedy(),
      [&](const GenerateResponse& m) {
        ids.insert(ids.end(), m.token_ids().begin(), m.token_ids().end());
        text += m.text();
      },
      [&](int64_t tokens, const grpc::Status& broken) {
        resumed_after.push_back(tokens);
        EXPECT_EQ(broken.error_code(), grpc::StatusCode::UNAVAILABLE);
      });
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(text, "<1><2><4><5>");
  EXPECT_EQ(resumed_after, (std::vector<int64_t>{3, 3}));
  const std::vector<GenerateRequest> got = fake_->requests();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_FALSE(got[0].has_resume());
  EXPECT_EQ(got[0].request_id(), "");
  for (int i : {1, 2}) {
    EXPECT_EQ(std::vector<int32_t>(got[i].resume().token_ids().begin(),
                                   got[i].resume().token_ids().end()),
              (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(got[i].resume().seed(), 99u);
    EXPECT_EQ(got[i].request_id(), "fake-1");
    EXPECT_EQ(got[i].prompt(), "hi");
  }
}

TEST_F(GenerationClientTest, AWrongRequestIsNotResent) {
  Start({{{{1}}, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "top_p")}});
  GenerationClient client(address_, absl::Seconds(30), {}, Quick());
  int resumes = 0;
  const grpc::Status status = client.Generate(
      Greedy(), [](const GenerateResponse&) {}, [&](int64_t, const grpc::Status&) { ++resumes; });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(resumes, 0);
  EXPECT_EQ(fake_->requests().size(), 1u);
}

TEST_F(GenerationClientTest, ResendsStopAtMaxResumes) {
  Start({});  // every call: UNAVAILABLE
  ResumePolicy policy = Quick();
  policy.max_resumes = 3;
  GenerationClient client(address_, absl::Seconds(30), {}, policy);
  const grpc::Status status = client.Generate(Greedy(), [](const GenerateResponse&) {});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(fake_->requests().size(), 4u);  // the call and 3 resends
  policy.max_resumes = 0;
  GenerationClient once(address_, absl::Seconds(30), {}, policy);
  EXPECT_FALSE(once.Generate(Greedy(), [](const GenerateResponse&) {}).ok());
  EXPECT_EQ(fake_->requests().size(), 5u);
}

TEST_F(GenerationClientTest, CancelEndsTheWaitBeforeAResend) {
  Start({});
  ResumePolicy policy;
  policy.initial_backoff = absl::Seconds(20);
  policy.max_backoff = absl::Seconds(20);
  GenerationClient client(address_, absl::ZeroDuration(), {}, policy);
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    client.Cancel();
  });
  const absl::Time start = absl::Now();
  const grpc::Status status = client.Generate(Greedy(), [](const GenerateResponse&) {});
  canceller.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(fake_->requests().size(), 1u);
}

}  // namespace
}  // namespace tpserve::client
