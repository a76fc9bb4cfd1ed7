#include "server/common/metrics_server.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->registry_ = std::make_shared<prometheus::Registry>();
  try {
    s->exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
  } catch (const std::exception& e) {  // CivetWeb throws when it cannot bind
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", address, ": ", e.what()));
  }
  s->exposer_->RegisterCollectable(s->registry_);
  return s;
}

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60};
}

prometheus::Histogram::BucketBoundaries FineLatencyBuckets(double first) {
  prometheus::Histogram::BucketBoundaries buckets;
  for (double decade : {1e-6, 1e-5, 1e-4}) {
    for (double step : {1.0, 2.0, 5.0}) {
      if (decade * step >= first * (1 - 1e-9)) buckets.push_back(decade * step);
    }
  }
  for (double b : LatencyBuckets()) buckets.push_back(b);
  return buckets;
}

}  // namespace tpserve
