#include "server/worker/heartbeat.h"

#include <algorithm>
#include <utility>

namespace tpserve::worker {

Heartbeat::Heartbeat(absl::Duration interval, std::function<bool()> beat)
    : interval_(interval), beat_(std::move(beat)) {
  absl::MutexLock lock(&join_mu_);
  thread_ = std::thread([this] { Loop(); });
}

Heartbeat::~Heartbeat() { Stop(); }

void Heartbeat::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  absl::MutexLock lock(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::Loop() {
  absl::Time next = absl::Now() + interval_;
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithDeadline(absl::Condition(&stopping_), next)) {
    mu_.Unlock();
    const bool alive = beat_();
    mu_.Lock();
    if (!alive) return;
    // Keep the cadence; after a beat that blocked past the next one, start again from now
    // rather than send the missed ones in a burst.
    next = std::max(next + interval_, absl::Now());
  }
}

}  // namespace tpserve::worker
