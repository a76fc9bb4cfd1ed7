#include "clients/cpp/stream_resume.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace tpserve::client {
namespace {

// Messages of INTERNAL / UNKNOWN statuses that gRPC's HTTP/2 transport makes when the
// connection or the stream breaks (the server's own INTERNAL errors say other things).
constexpr absl::string_view kTransportBreaks[] = {
    "RST_STREAM", "Stream removed", "Socket closed", "GOAWAY", "Connection reset", "Broken pipe",
};

}  // namespace

bool IsStreamBreak(const grpc::Status& status, bool cancelled_by_caller) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return true;
    case grpc::StatusCode::CANCELLED:
      return !cancelled_by_caller;
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
      return std::any_of(std::begin(kTransportBreaks), std::end(kTransportBreaks),
                         [&](absl::string_view needle) {
                           return absl::StrContains(status.error_message(), needle);
                         });
    default:
      return false;
  }
}

absl::Duration ResumeBackoff(const ResumePolicy& policy, int attempt, double jitter) {
  absl::Duration step = policy.initial_backoff;
  for (int i = 0; i < attempt && step < policy.max_backoff; ++i) step *= 2;
  step = std::min(step, policy.max_backoff);
  return step / 2 + step * (std::clamp(jitter, 0.0, 1.0) / 2);
}

StreamResume::StreamResume(const tpserve::v1::GenerateRequest& request, const ResumePolicy& policy)
    : original_(request), policy_(policy) {}

void StreamResume::Observe(const tpserve::v1::GenerateResponse& message) {
  received_.insert(received_.end(), message.token_ids().begin(), message.token_ids().end());
  if (message.token_ids_size() > 0) outage_began_ = absl::InfiniteFuture();
  if (message.has_seed() && !seed_.has_value()) seed_ = message.seed();
  if (request_id_.empty()) request_id_ = message.request_id();
  if (message.finish_reason() != tpserve::v1::FINISH_REASON_UNSPECIFIED) finished_ = true;
}

tpserve::v1::GenerateRequest StreamResume::Next() const {
  tpserve::v1::GenerateRequest next = original_;
  if (resumes_ == 0) return next;
  if (next.request_id().empty()) next.set_request_id(request_id_);
  if (received_.empty() && !seed_.has_value() && !next.has_seed()) return next;
  tpserve::v1::Resume* resume = next.mutable_resume();
  for (int32_t id : received_) resume->add_token_ids(id);
  if (seed_.has_value()) {
    resume->set_seed(*seed_);
  } else if (next.has_seed()) {
    resume->set_seed(next.seed());
  }
  return next;
}

std::optional<absl::Duration> StreamResume::NextResume(const grpc::Status& status,
                                                       bool cancelled_by_caller, absl::Time now,
                                                       absl::Time deadline, double jitter) {
  if (status.ok() || finished_ || !IsStreamBreak(status, cancelled_by_caller)) {
    return std::nullopt;
  }
  if (!received_.empty() && !seed_.has_value()) return std::nullopt;  // no resume on the server
  const int64_t held = original_.resume().token_ids_size() + tokens_received();
  if (original_.max_tokens() > 0 && held >= original_.max_tokens()) return std::nullopt;
  if (resumes_ >= policy_.max_resumes) return std::nullopt;
  outage_began_ = std::min(outage_began_, now);
  if (now - outage_began_ > policy_.max_resume_time) return std::nullopt;
  const absl::Duration wait = ResumeBackoff(policy_, resumes_, jitter);
  if (now + wait >= deadline) return std::nullopt;
  ++resumes_;
  return wait;
}

}  // namespace tpserve::client
