// StreamResume: which endings are breaks, the backoff, the resent request built from what
// arrived, and every bound on resending.
#include "clients/cpp/stream_resume.h"

#include <gtest/gtest.h>

#include <vector>

namespace tpserve::client {
namespace {

using tpserve::v1::GenerateRequest;
using tpserve::v1::GenerateResponse;

const grpc::Status kUnavailable(grpc::StatusCode::UNAVAILABLE, "Connection reset by peer");
const absl::Time kT0 = absl::FromUnixSeconds(1000);
const absl::Time kNoDeadline = absl::InfiniteFuture();

GenerateRequest Greedy(uint32_t max_tokens) {
  GenerateRequest r;
  r.set_prompt("Once upon a time");
  r.set_max_tokens(max_tokens);
  r.set_temperature(0);
  return r;
}

GenerateResponse Message(const std::vector<int32_t>& ids,
                         std::optional<uint64_t> seed = std::nullopt,
                         const char* request_id = "srv-7") {
  GenerateResponse m;
  for (int32_t id : ids) m.add_token_ids(id);
  m.set_text("x");
  m.set_request_id(request_id);
  if (seed.has_value()) m.set_seed(*seed);
  return m;
}

std::vector<int32_t> ResumeIds(const GenerateRequest& r) {
  return {r.resume().token_ids().begin(), r.resume().token_ids().end()};
}

TEST(IsStreamBreakTest, ResumesOnlyWhenTheStreamBroke) {
  using C = grpc::StatusCode;
  EXPECT_TRUE(IsStreamBreak(grpc::Status(C::UNAVAILABLE, "failed to connect"), false));
  EXPECT_TRUE(IsStreamBreak(grpc::Status(C::UNAVAILABLE, "the server is draining"), false));
  EXPECT_TRUE(IsStreamBreak(grpc::Status(C::UNAVAILABLE, "anything"), true));
  EXPECT_TRUE(
      IsStreamBreak(grpc::Status(C::INTERNAL, "Received RST_STREAM with error code 2"), false));
  EXPECT_TRUE(IsStreamBreak(grpc::Status(C::UNKNOWN, "Stream removed"), false));
  EXPECT_TRUE(IsStreamBreak(grpc::Status(C::CANCELLED, "Cancelled"), false));
  EXPECT_FALSE(IsStreamBreak(grpc::Status(C::CANCELLED, "Cancelled"), true));
  EXPECT_FALSE(IsStreamBreak(grpc::Status(C::INTERNAL, "the model produced NaN"), false));
  EXPECT_FALSE(IsStreamBreak(grpc::Status(C::UNKNOWN, "an exception"), false));
  for (C code : {C::OK, C::INVALID_ARGUMENT, C::RESOURCE_EXHAUSTED, C::DEADLINE_EXCEEDED,
                 C::UNAUTHENTICATED, C::PERMISSION_DENIED, C::FAILED_PRECONDITION, C::NOT_FOUND,
                 C::ABORTED, C::UNIMPLEMENTED, C::OUT_OF_RANGE}) {
    EXPECT_FALSE(IsStreamBreak(grpc::Status(code, "Socket closed"), false)) << code;
  }
}

TEST(ResumeBackoffTest, DoublesToTheCapWithJitterBetweenHalfAndAll) {
  const ResumePolicy policy;  // 100 ms doubling to 2 s
  EXPECT_EQ(ResumeBackoff(policy, 0, 0.0), absl::Milliseconds(50));
  EXPECT_EQ(ResumeBackoff(policy, 0, 0.5), absl::Milliseconds(75));
  EXPECT_EQ(ResumeBackoff(policy, 1, 0.0), absl::Milliseconds(100));
  EXPECT_EQ(ResumeBackoff(policy, 3, 0.0), absl::Milliseconds(400));
  EXPECT_EQ(ResumeBackoff(policy, 4, 0.0), absl::Milliseconds(800));
  EXPECT_EQ(ResumeBackoff(policy, 5, 0.0), absl::Seconds(1));  // 3.2 s capped at 2 s
  EXPECT_EQ(ResumeBackoff(policy, 5, 1.0), absl::Seconds(2));
  EXPECT_EQ(ResumeBackoff(policy, 1000, 0.999), ResumeBackoff(policy, 6, 0.999));
  for (int attempt = 0; attempt < 40; ++attempt) {
    for (double j : {0.0, 0.3, 0.999}) {
      const absl::Duration d = ResumeBackoff(policy, attempt, j);
      EXPECT_GE(d, absl::Milliseconds(50));
      EXPECT_LE(d, policy.max_backoff);
    }
  }
}

TEST(StreamResumeTest, TheFirstRequestIsTheOriginal) {
  GenerateRequest request = Greedy(48);
  request.set_seed(5);
  const StreamResume resume(request, ResumePolicy());
  const GenerateRequest next = resume.Next();
  EXPECT_EQ(next.SerializeAsString(), request.SerializeAsString());
  EXPECT_FALSE(next.has_resume());
}

TEST(StreamResumeTest, ResendsEveryTokenWithTheSeedAndTheServersRequestId) {
  StreamResume resume(Greedy(48), ResumePolicy());
  resume.Observe(Message({11, 12}, 4242));
  resume.Observe(Message({13}));
  resume.Observe(Message({}));  // text only
  const auto wait = resume.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0);
  ASSERT_TRUE(wait.has_value());
  EXPECT_EQ(*wait, absl::Milliseconds(50));
  EXPECT_EQ(resume.resumes(), 1);
  EXPECT_EQ(resume.tokens_received(), 3);
  GenerateRequest next = resume.Next();
  EXPECT_EQ(ResumeIds(next), (std::vector<int32_t>{11, 12, 13}));
  ASSERT_TRUE(next.resume().has_seed());
  EXPECT_EQ(next.resume().seed(), 4242u);
  EXPECT_EQ(next.request_id(), "srv-7");
  EXPECT_EQ(next.prompt(), "Once upon a time");
  EXPECT_EQ(next.max_tokens(), 48u);
  EXPECT_FALSE(next.has_seed());  // the request stays as the caller wrote it

  // A second break: the resend carries the tokens of both streams, the caller's id wins.
  GenerateRequest named = Greedy(48);
  named.set_request_id("mine");
  StreamResume again(named, ResumePolicy());
  again.Observe(Message({1}, 9, "mine"));
  ASSERT_TRUE(again.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  again.Observe(Message({2, 3}, 9, "mine"));
  const auto second = again.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*second, absl::Milliseconds(100));
  next = again.Next();
  EXPECT_EQ(ResumeIds(next), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(next.request_id(), "mine");
}

TEST(StreamResumeTest, ABreakBeforeAnyMessageResendsNoTokens) {
  StreamResume unseeded(Greedy(48), ResumePolicy());
  ASSERT_TRUE(unseeded.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  GenerateRequest next = unseeded.Next();
  EXPECT_FALSE(next.has_resume());
  EXPECT_EQ(next.request_id(), "");

  GenerateRequest request = Greedy(48);
  request.set_seed(77);
  StreamResume seeded(request, ResumePolicy());
  ASSERT_TRUE(seeded.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  next = seeded.Next();
  EXPECT_TRUE(next.has_resume());
  EXPECT_EQ(next.resume().token_ids_size(), 0);
  EXPECT_EQ(next.resume().seed(), 77u);
}

TEST(StreamResumeTest, KeepsTheCallersOwnResumeFirst) {
  GenerateRequest request = Greedy(48);
  request.mutable_resume()->add_token_ids(100);
  request.mutable_resume()->add_token_ids(101);
  request.mutable_resume()->set_seed(3);
  StreamResume resume(request, ResumePolicy());
  resume.Observe(Message({102}, 3));
  ASSERT_TRUE(resume.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  const GenerateRequest next = resume.Next();
  EXPECT_EQ(ResumeIds(next), (std::vector<int32_t>{100, 101, 102}));
  EXPECT_EQ(next.resume().seed(), 3u);
}

TEST(StreamResumeTest, DoesNotResendWhatMustNotBeResent) {
  const ResumePolicy policy;
  {  // the final message arrived: the stream is whole
    StreamResume resume(Greedy(48), policy);
    GenerateResponse last = Message({5}, 1);
    last.set_finish_reason(tpserve::v1::FINISH_REASON_LENGTH);
    resume.Observe(last);
    EXPECT_TRUE(resume.finished());
    EXPECT_FALSE(resume.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  }
  {  // the request is wrong, or the caller cancelled it
    StreamResume resume(Greedy(48), policy);
    EXPECT_FALSE(resume.NextResume(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no"), false,
                                   kT0, kNoDeadline, 0.0));
    EXPECT_FALSE(resume.NextResume(grpc::Status(grpc::StatusCode::CANCELLED, "Cancelled"), true,
                                   kT0, kNoDeadline, 0.0));
    EXPECT_FALSE(resume.NextResume(grpc::Status::OK, false, kT0, kNoDeadline, 0.0));
  }
  {  // tokens but no seed: a server that knows no resume would start over
    StreamResume resume(Greedy(48), policy);
    resume.Observe(Message({5}));
    EXPECT_FALSE(resume.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  }
  {  // every allowed token arrived (the final message did not)
    StreamResume resume(Greedy(2), policy);
    resume.Observe(Message({5, 6}, 1));
    EXPECT_FALSE(resume.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  }
  {  // the wait would pass the caller's deadline
    StreamResume resume(Greedy(48), policy);
    EXPECT_FALSE(resume.NextResume(kUnavailable, false, kT0, kT0 + absl::Milliseconds(40), 0.0));
    EXPECT_TRUE(resume.NextResume(kUnavailable, false, kT0, kT0 + absl::Seconds(1), 0.0));
  }
}

TEST(StreamResumeTest, ResendsAreBoundedInNumberAndTime) {
  ResumePolicy policy;
  policy.max_resumes = 3;
  StreamResume counted(Greedy(48), policy);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(counted.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  }
  EXPECT_FALSE(counted.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  EXPECT_EQ(counted.resumes(), 3);

  policy.max_resumes = 0;
  StreamResume disabled(Greedy(48), policy);
  EXPECT_FALSE(disabled.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());

  policy.max_resumes = 100;
  policy.max_resume_time = absl::Seconds(5);
  StreamResume timed(Greedy(48), policy);
  EXPECT_TRUE(timed.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  EXPECT_TRUE(timed.NextResume(kUnavailable, false, kT0 + absl::Seconds(5), kNoDeadline, 0.0));
  EXPECT_FALSE(timed.NextResume(kUnavailable, false, kT0 + absl::Seconds(6), kNoDeadline, 0.0));
}

TEST(StreamResumeTest, TokensBetweenBreaksStartANewOutage) {
  ResumePolicy policy;
  policy.max_resume_time = absl::Seconds(5);
  StreamResume resume(Greedy(48), policy);
  tpserve::v1::GenerateResponse first;
  first.set_seed(7);
  first.add_token_ids(11);
  resume.Observe(first);
  EXPECT_TRUE(resume.NextResume(kUnavailable, false, kT0, kNoDeadline, 0.0).has_value());
  // The resumed stream delivers tokens for a minute, then breaks again: a new outage.
  tpserve::v1::GenerateResponse later;
  later.add_token_ids(12);
  resume.Observe(later);
  const absl::Time second = kT0 + absl::Seconds(60);
  EXPECT_TRUE(resume.NextResume(kUnavailable, false, second, kNoDeadline, 0.0).has_value());
  // Breaks with no token between them stay one outage, bounded in time.
  EXPECT_TRUE(resume.NextResume(kUnavailable, false, second + absl::Seconds(5), kNoDeadline, 0.0));
  EXPECT_FALSE(resume.NextResume(kUnavailable, false, second + absl::Seconds(6), kNoDeadline, 0.0));
  EXPECT_EQ(resume.resumes(), 3);
}

}  // namespace
}  // namespace tpserve::client
