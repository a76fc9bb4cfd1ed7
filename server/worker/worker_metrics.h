// WorkerMetrics: a worker's Prometheus metrics, labelled with its rank (known at Init, so
// each rank's children are made on first use): step and all-reduce durations, bytes
// all-reduced, resident weight and KV cache bytes. Thread-safe (prometheus-cpp metrics are).
#ifndef TPSERVE_SERVER_WORKER_WORKER_METRICS_H_
#define TPSERVE_SERVER_WORKER_WORKER_METRICS_H_

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
  };

  explicit WorkerMetrics(prometheus::Registry& registry);
  Rank ForRank(int rank);

 private:
  prometheus::Family<prometheus::Histogram>& step_duration_;
  prometheus::Family<prometheus::Histogram>& allreduce_duration_;
  prometheus::Family<prometheus::Counter>& allreduce_bytes_;
  prometheus::Family<prometheus::Gauge>& weight_bytes_;
  prometheus::Family<prometheus::Gauge>& kv_cache_bytes_;
};

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_WORKER_METRICS_H_
