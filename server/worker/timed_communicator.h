// TimedCommunicator: a Communicator decorator that adds the wall time of every collective
// to a counter, for the comm_ns of a StepResult, and records each all-reduce's duration and
// bytes in the worker's metrics when given them. Owns the wrapped communicator. Same
// threading as the wrapped one; comm_ns() and Abort() may be called from any thread.
#ifndef TPSERVE_SERVER_WORKER_TIMED_COMMUNICATOR_H_
#define TPSERVE_SERVER_WORKER_TIMED_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/time/clock.h"
#include "server/comm/communicator.h"
#include "server/worker/worker_metrics.h"

namespace tpserve::worker {

class TimedCommunicator final : public comm::Communicator {
 public:
  // `metrics` may be null; it must outlive the communicator.
  TimedCommunicator(std::unique_ptr<comm::Communicator> inner, WorkerMetrics::Rank* metrics)
      : inner_(std::move(inner)), metrics_(metrics) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string_view backend_name() const override { return inner_->backend_name(); }
  absl::Status AllReduceSum(float* data, int64_t count) override {
    return TimedReduce(count * sizeof(float), [&] { return inner_->AllReduceSum(data, count); });
  }
  absl::Status AllReduceSumInt64(int64_t* data, int64_t count) override {
    return TimedReduce(count * sizeof(int64_t),
                       [&] { return inner_->AllReduceSumInt64(data, count); });
  }
  absl::Status AllGather(const float* in, int64_t count, float* out) override {
    return Timed([&] { return inner_->AllGather(in, count, out); });
  }
  absl::Status Gather(const float* in, int64_t count, float* out) override {
    return Timed([&] { return inner_->Gather(in, count, out); });
  }
  absl::Status Synchronize() override {
    return Timed([&] { return inner_->Synchronize(); });
  }
  void Abort() override { inner_->Abort(); }

  // Nanoseconds spent in collectives since construction.
  int64_t comm_ns() const { return comm_ns_.load(std::memory_order_relaxed); }

 private:
  template <typename F>
  absl::Status Timed(F f) {
    const absl::Time start = absl::Now();
    absl::Status status = f();
    comm_ns_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start), std::memory_order_relaxed);
    return status;
  }

  // An all-reduce of `bytes`: timed, and observed in the metrics.
  template <typename F>
  absl::Status TimedReduce(int64_t bytes, F f) {
    const absl::Time start = absl::Now();
    absl::Status status = Timed(f);
    if (metrics_ != nullptr) {
      metrics_->allreduce_duration.Observe(absl::ToDoubleSeconds(absl::Now() - start));
      metrics_->allreduce_bytes.Increment(static_cast<double>(bytes));
    }
    return status;
  }

  std::unique_ptr<comm::Communicator> inner_;
  WorkerMetrics::Rank* const metrics_;
  std::atomic<int64_t> comm_ns_{0};
};

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_TIMED_COMMUNICATOR_H_
