// Heartbeat: a thread of its own that calls `beat` every `interval`, from construction until
// Stop() (or destruction), or until `beat` returns false (what it writes to is gone). It
// keeps its cadence whatever else the process does; it waits on a mutex condition, not in a
// sleep, so that Stop wakes and joins it at once. The worker's Session uses it to send
// WorkerMessage.heartbeat. Thread-safe.
#ifndef TPSERVE_SERVER_WORKER_HEARTBEAT_H_
#define TPSERVE_SERVER_WORKER_HEARTBEAT_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tpserve::worker {

class Heartbeat {
 public:
  // Starts the thread; the first beat comes one `interval` (> 0) from now.
  Heartbeat(absl::Duration interval, std::function<bool()> beat);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Stops the beats (a beat in progress finishes first) and joins the thread. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration interval_;
  const std::function<bool()> beat_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;                           // one joiner at a time
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);  // last: it starts once the rest is built
};

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_HEARTBEAT_H_
