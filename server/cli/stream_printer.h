// StreamPrinter: the ResponseSink of `tpserve generate`: prints one request's stream to an
// ostream as the engine delivers it — the text, then a newline; or (json) one JSON object per
// token ({"id", "text", "logprob", "top"}) and, last, a summary ({"finish_reason", "token_ids",
// "prompt_tokens", "completion_tokens"}) — and hands the end of the stream to the thread
// waiting for it. Thread-safe: the engine's thread calls Send and Close, another Wait().
#ifndef TPSERVE_SERVER_CLI_STREAM_PRINTER_H_
#define TPSERVE_SERVER_CLI_STREAM_PRINTER_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/coordinator/response_sink.h"

namespace tpserve::cli {

class StreamPrinter final : public coordinator::ResponseSink {
 public:
  // `out` must outlive the printer. `top_logprobs`: alternatives shown per token in JSON (the
  // request must ask for at least one logprob for "logprob" to be shown, and for this many).
  StreamPrinter(std::ostream& out, bool json, uint32_t top_logprobs)
      : json_(json), top_logprobs_(top_logprobs), out_(out) {}

  void Send(tpserve::v1::GenerateResponse message) override ABSL_LOCKS_EXCLUDED(mu_);
  void Close(const absl::Status& status) override ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const override { return false; }

  // Blocks until Close; the status the stream ended with.
  absl::Status Wait() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void PrintTokensLocked(const tpserve::v1::GenerateResponse& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PrintSummaryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool json_;
  const uint32_t top_logprobs_;
  absl::Mutex mu_;
  std::ostream& out_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> token_ids_ ABSL_GUARDED_BY(mu_);      // every token streamed
  tpserve::v1::GenerateResponse last_ ABSL_GUARDED_BY(mu_);  // carries finish_reason, usage
  std::optional<absl::Status> closed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_STREAM_PRINTER_H_
