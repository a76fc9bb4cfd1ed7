// MetricsServer: the Prometheus pull endpoint of one process — a registry and the HTTP
// exposer (prometheus-cpp) serving it at http://HOST:PORT/metrics. The process's metric
// sets (coordinator, worker) register their families in registry(). Thread-safe.
#ifndef TPSERVE_SERVER_COMMON_METRICS_SERVER_H_
#define TPSERVE_SERVER_COMMON_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tpserve {

class MetricsServer {
 public:
  // Listens on `address` (HOST:PORT); Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address);

  prometheus::Registry& registry() { return *registry_; }
  const std::shared_ptr<prometheus::Registry>& shared_registry() const { return registry_; }

 private:
  MetricsServer() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

// Histogram buckets for latencies, 1 ms .. 60 s (seconds).
prometheus::Histogram::BucketBoundaries LatencyBuckets();

// Histogram buckets for latencies that can take microseconds (a shared-memory collective, a
// step's overhead): `first` (seconds) and the 1-2-5 steps above it, then LatencyBuckets().
prometheus::Histogram::BucketBoundaries FineLatencyBuckets(double first);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_METRICS_SERVER_H_
