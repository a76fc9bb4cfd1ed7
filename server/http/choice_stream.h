// ChoiceStream: the meeting point of one HTTP request's choices (one engine request each,
// `n` of them) and the HTTP thread that answers it. Each choice has a ResponseSink the engine
// delivers into; the HTTP thread takes their messages and closes, in arrival order, with
// Next. When the client goes away, Cancel makes every sink report cancelled(), and the
// engine drops the requests at its next step. Held by shared_ptr: the sinks keep it alive
// after the HTTP thread has gone. Thread-safe: the engine thread and the HTTP
// thread meet under mu_.
#ifndef TPSERVE_SERVER_HTTP_CHOICE_STREAM_H_
#define TPSERVE_SERVER_HTTP_CHOICE_STREAM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/coordinator/response_sink.h"
#include "tpserve/v1/generate.pb.h"

namespace tpserve::http {

class ChoiceStream : public std::enable_shared_from_this<ChoiceStream> {
 public:
  // One choice's message, or (no message) the end of that choice with its status.
  struct Event {
    uint32_t index = 0;
    std::optional<tpserve::v1::GenerateResponse> message;
    absl::Status closed;  // meaningful when there is no message
  };

  explicit ChoiceStream(uint32_t choices);

  // The sink of choice `index` (< choices), to hand to BatchEngine::Submit.
  std::shared_ptr<coordinator::ResponseSink> Sink(uint32_t index);
  // Marks choice `index` ended without reaching the engine (its submission was refused).
  void Abandon(uint32_t index, const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  // The next event, waiting up to `timeout`; nullopt when none came or all are consumed.
  std::optional<Event> Next(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // True once every choice has closed and every event has been taken.
  bool Done() const ABSL_LOCKS_EXCLUDED(mu_);
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }

 private:
  class ChoiceSink;
  void Push(Event event) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  uint32_t open_ ABSL_GUARDED_BY(mu_);  // choices not yet closed
  std::atomic<bool> cancelled_{false};
};

}  // namespace tpserve::http

#endif  // TPSERVE_SERVER_HTTP_CHOICE_STREAM_H_
