// StreamResume: how a client continues a Generate stream that broke (a coordinator restart,
// a lost connection, a draining server) instead of failing the call. It decides which ending
// statuses mean "the stream broke" rather than "the request is wrong", how long to wait
// before resending (bounded exponential backoff with jitter, a bounded number of resends and
// of time), and builds the resent request: the original with GenerateRequest.resume holding
// every token id received so far and the seed the server reported, and the server's
// request_id. Pure (no I/O, no clock, no randomness of its own) and not thread-safe: one
// object per logical Generate call, driven by the thread that reads the stream.
#ifndef TPSERVE_CLIENTS_CPP_STREAM_RESUME_H_
#define TPSERVE_CLIENTS_CPP_STREAM_RESUME_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/support/status.h"
#include "tpserve/v1/generate.pb.h"

namespace tpserve::client {

struct ResumePolicy {
  // Resends per logical call at most; 0 disables resuming.
  int max_resumes = 8;
  // The wait before resend k (0-based) is min(max_backoff, initial_backoff * 2^k), jittered
  // down to between half and all of it.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  // No resend starts later than this after the break that began the current outage (the
  // first break since tokens last arrived): a long stream may ride out several restarts.
  absl::Duration max_resume_time = absl::Seconds(30);
};

// Whether a stream that ended with `status` broke rather than the request failing:
// UNAVAILABLE (refused or reset connection, a server restarting, draining, or whose world is
// not ready); INTERNAL or UNKNOWN whose message comes from the HTTP/2 transport (RST_STREAM,
// GOAWAY, a closed socket); CANCELLED that the caller did not ask for (a RST_STREAM(CANCEL)
// from the server or a proxy). Never OK, INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
// DEADLINE_EXCEEDED, a caller's CANCELLED, UNAUTHENTICATED, PERMISSION_DENIED or the rest.
bool IsStreamBreak(const grpc::Status& status, bool cancelled_by_caller);

// The wait before resend `attempt` (0-based) under `policy`; `jitter` in [0, 1) picks it
// between half and all of the exponential step.
absl::Duration ResumeBackoff(const ResumePolicy& policy, int attempt, double jitter);

class StreamResume {
 public:
  StreamResume(const tpserve::v1::GenerateRequest& request, const ResumePolicy& policy);

  // Records one message of the stream: its token ids, the seed and request id the server
  // reported, whether it is the final one (finish_reason set). Tokens end an outage.
  void Observe(const tpserve::v1::GenerateResponse& message);

  // The request to send now: the original one before any break; after one, the original
  // with resume.token_ids = the caller's own resume.token_ids, if any, then every token id
  // received; resume.seed = the seed the server reported (else the request's own or the
  // caller's resume.seed, else unset); request_id = the server's when the caller gave none.
  tpserve::v1::GenerateRequest Next() const;

  // After a stream ended with `status` at `now`: the wait before resending, or nullopt when
  // the call ends with `status` — it is OK or final, not a break (IsStreamBreak), the server
  // cannot resume (tokens arrived but no seed was reported: a server that does not know
  // GenerateRequest.resume would start over), every allowed token has arrived, the resends or
  // the time are spent, or the wait would pass `deadline`. Counts the resend it allows.
  // `jitter` in [0, 1) as for ResumeBackoff.
  std::optional<absl::Duration> NextResume(const grpc::Status& status, bool cancelled_by_caller,
                                           absl::Time now, absl::Time deadline, double jitter);

  // Token ids received in this call, over every stream.
  int64_t tokens_received() const { return static_cast<int64_t>(received_.size()); }
  // Resends allowed so far.
  int resumes() const { return resumes_; }
  // Whether the final message (finish_reason set) has arrived.
  bool finished() const { return finished_; }

 private:
  const tpserve::v1::GenerateRequest original_;
  const ResumePolicy policy_;
  std::vector<int32_t> received_;
  std::optional<uint64_t> seed_;  // reported by the server
  std::string request_id_;        // reported by the server
  bool finished_ = false;
  int resumes_ = 0;
  absl::Time outage_began_ = absl::InfiniteFuture();  // no outage: no break since tokens
};

}  // namespace tpserve::client

#endif  // TPSERVE_CLIENTS_CPP_STREAM_RESUME_H_
