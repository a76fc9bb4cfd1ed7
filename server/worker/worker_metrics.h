// WorkerMetrics: a worker's Prometheus metrics, labelled with its rank (known at Init, so
// each rank's children are made on first use): step and all-reduce durations, bytes
// all-reduced, resident weight and KV cache bytes, compute threads, and the communicator in
// use (tpserve_worker_communicator_info{rank, backend} is 1 for it, 0 for the others).
// Thread-safe (prometheus-cpp metrics are).
#ifndef TPSERVE_SERVER_WORKER_WORKER_METRICS_H_
#define TPSERVE_SERVER_WORKER_WORKER_METRICS_H_

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tpserve::worker {

class WorkerMetrics {
 public:
  // One rank's metrics.
  struct Rank {
    prometheus::Histogram& step_duration;
    prometheus::Histogram& allreduce_duration;
    prometheus::Counter& allreduce_bytes;
    prometheus::Gauge& weight_bytes;
    prometheus::Gauge& kv_cache_bytes;
    prometheus::Gauge& threads;
  };

  explicit WorkerMetrics(prometheus::Registry& registry);
  Rank ForRank(int rank);
  // Marks `backend` ("shm", "gloo", "nccl", "local") as rank's communicator.
  void SetCommunicator(int rank, const std::string& backend);

 private:
  prometheus::Family<prometheus::Histogram>& step_duration_;
  prometheus::Family<prometheus::Histogram>& allreduce_duration_;
  prometheus::Family<prometheus::Counter>& allreduce_bytes_;
  prometheus::Family<prometheus::Gauge>& weight_bytes_;
  prometheus::Family<prometheus::Gauge>& kv_cache_bytes_;
  prometheus::Family<prometheus::Gauge>& threads_;
  prometheus::Family<prometheus::Gauge>& communicator_;
};

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_WORKER_METRICS_H_
