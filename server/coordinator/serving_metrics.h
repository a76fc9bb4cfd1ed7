// ServingMetrics: the coordinator's Prometheus metrics (names as in DESIGN.md's Observability
// section), registered in one registry. Labels are bounded: a request's status code, a
// worker's rank — never a request id. prometheus-cpp metrics are thread-safe; so is this.
#ifndef TPSERVE_SERVER_COORDINATOR_SERVING_METRICS_H_
#define TPSERVE_SERVER_COORDINATOR_SERVING_METRICS_H_

#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tpserve::coordinator {

class ServingMetrics {
 public:
  ServingMetrics(prometheus::Registry& registry, int world_size);

  // One per generation request, at its end (refusals included), by the front end it came
  // through (`api`: "grpc" or "http"); status "ok" when it finished.
  void CountRequest(const absl::Status& status, absl::string_view api);
  // tpserve_worker_up: every rank 1; or 0 for the rank blamed for the world's fall (every
  // rank when `blamed_rank` < 0).
  // `members`: the workers (positions in the list) of the world now up.
  void SetWorldUp(const std::vector<int>& members);
  void SetWorldDown(int blamed_rank);

  prometheus::Histogram& time_to_first_token;
  prometheus::Histogram& inter_token_latency;
  prometheus::Histogram& request_duration;
  prometheus::Histogram& queue_duration;
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& generated_tokens;
  prometheus::Gauge& requests_running;
  prometheus::Gauge& requests_waiting;
  prometheus::Gauge& kv_cache_usage;
  prometheus::Histogram& batch_size;
  prometheus::Histogram& step_duration;
  prometheus::Histogram& step_overhead;
  prometheus::Counter& preemptions;
  // Prefix caching, in tokens as vLLM counts them: positions looked up at admission, and
  // those found cached; cached blocks now, and cached blocks evicted.
  prometheus::Counter& prefix_cache_queries;
  prometheus::Counter& prefix_cache_hits;
  prometheus::Gauge& prefix_cache_blocks;
  prometheus::Counter& prefix_cache_evictions;
  // Speculative decoding: tokens proposed and accepted, and acceptances by the proposal's
  // position in its draft (1 = the first proposed token).
  prometheus::Counter& spec_draft_tokens;
  prometheus::Counter& spec_accepted_tokens;
  void CountAcceptedAt(int position);

 private:
  prometheus::Family<prometheus::Counter>& spec_accepted_by_position_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Gauge& world_size_;
  std::vector<prometheus::Gauge*> worker_up_;  // [world_size]
};

// Seconds as a double, for Observe().
inline double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_SERVING_METRICS_H_
