#include "server/coordinator/serving_metrics.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/common/metrics_server.h"

namespace tpserve::coordinator {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

prometheus::Histogram& Latency(prometheus::Registry& r, const char* name, const char* help) {
  return BuildHistogram().Name(name).Help(help).Register(r).Add({}, LatencyBuckets());
}

prometheus::Counter& Counter(prometheus::Registry& r, const char* name, const char* help) {
  return BuildCounter().Name(name).Help(help).Register(r).Add({});
}

prometheus::Gauge& Gauge(prometheus::Registry& r, const char* name, const char* help) {
  return BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

ServingMetrics::ServingMetrics(prometheus::Registry& r, int world_size)
    : time_to_first_token(Latency(r, "tpserve_time_to_first_token_seconds",
                                  "From the request's arrival to its first streamed token")),
      inter_token_latency(Latency(r, "tpserve_inter_token_latency_seconds",
                                  "Between consecutive streamed tokens of one request")),
      request_duration(Latency(r, "tpserve_request_duration_seconds",
                               "From arrival to the end of a request that reached the engine")),
      queue_duration(Latency(r, "tpserve_queue_duration_seconds",
                             "From arrival to admission into the running batch")),
      prompt_tokens(Counter(r, "tpserve_prompt_tokens_total", "Prompt tokens admitted")),
      generated_tokens(Counter(r, "tpserve_generated_tokens_total", "Tokens streamed to clients")),
      requests_running(Gauge(r, "tpserve_requests_running", "Requests in the running batch")),
      requests_waiting(Gauge(r, "tpserve_requests_waiting", "Requests waiting for admission")),
      kv_cache_usage(Gauge(r, "tpserve_kv_cache_usage_ratio", "Fraction of KV blocks in use")),
      batch_size(
          BuildHistogram()
              .Name("tpserve_batch_size")
              .Help("Sequences per worker step")
              .Register(r)
              .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256})),
      step_duration(Latency(r, "tpserve_step_duration_seconds",
                            "One step on the worker world, fan-out to the last result")),
      step_overhead(BuildHistogram()
                        .Name("tpserve_step_overhead_seconds")
                        .Help("One step's wall time less the slowest rank's compute and "
                              "collectives: moving the step and its results")
                        .Register(r)
                        .Add({}, FineLatencyBuckets(1e-5))),
      preemptions(Counter(r, "tpserve_preemptions_total",
                          "Sequences preempted (KV blocks freed, recomputed later)")),
      prefix_cache_queries(Counter(r, "tpserve_prefix_cache_queries_total",
                                   "Prompt positions looked up in the prefix cache")),
      prefix_cache_hits(Counter(r, "tpserve_prefix_cache_hits_total",
                                "Prompt positions found in the prefix cache (not computed)")),
      prefix_cache_blocks(Gauge(r, "tpserve_prefix_cache_blocks",
                                "KV blocks cached under their content (held or evictable)")),
      prefix_cache_evictions(Counter(r, "tpserve_prefix_cache_evictions_total",
                                     "Cached KV blocks evicted to make room")),
      spec_draft_tokens(Counter(r, "tpserve_spec_draft_tokens_total",
                                "Speculative decoding: tokens proposed for verification")),
      spec_accepted_tokens(Counter(r, "tpserve_spec_accepted_tokens_total",
                                   "Speculative decoding: proposed tokens the target accepted")),
      spec_accepted_by_position_(
          BuildCounter()
              .Name("tpserve_spec_accepted_by_position_total")
              .Help("Speculative decoding: accepted proposals by their position in the draft "
                    "(1 = the first proposed token)")
              .Register(r)),
      requests_(BuildCounter()
                    .Name("tpserve_requests_total")
                    .Help("Generation requests by front end (api: grpc, http) and final status "
                          "(ok, or the gRPC code)")
                    .Register(r)),
      world_size_(Gauge(r, "tpserve_world_size",
                        "Ranks in the world now up (an elastic world: the workers it has now)")) {
  prometheus::Family<prometheus::Gauge>& up =
      BuildGauge()
          .Name("tpserve_worker_up")
          .Help(
              "0 for the worker that took the world down (every one when none is named) until "
              "the world is up again, and for a worker an elastic world goes on without; 1 "
              "otherwise (rank: the worker's position in the list)")
          .Register(r);
  for (int rank = 0; rank < world_size; ++rank) {
    worker_up_.push_back(&up.Add({{"rank", std::to_string(rank)}}));
  }
  for (const char* api : {"grpc", "http"}) {
    for (const char* status : {"ok", "cancelled", "invalid_argument", "resource_exhausted",
                               "unavailable", "deadline_exceeded", "internal"}) {
      requests_.Add({{"api", api}, {"status", status}});  // present from the start, at 0
    }
  }
}

void ServingMetrics::CountRequest(const absl::Status& status, absl::string_view api) {
  std::string name = absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
  if (status.code() == absl::StatusCode::kUnknown) name = "internal";
  requests_.Add({{"api", static_cast<std::string>(api)}, {"status", name}}).Increment();
}

void ServingMetrics::CountAcceptedAt(int position) {
  spec_accepted_by_position_.Add({{"position", std::to_string(position)}}).Increment();
}

void ServingMetrics::SetWorldUp(const std::vector<int>& members) {
  for (prometheus::Gauge* g : worker_up_) g->Set(0);  // left out of an elastic world
  for (int w : members) {
    if (w >= 0 && static_cast<size_t>(w) < worker_up_.size()) worker_up_[w]->Set(1);
  }
  world_size_.Set(static_cast<double>(members.size()));
}

void ServingMetrics::SetWorldDown(int blamed_rank) {
  for (size_t rank = 0; rank < worker_up_.size(); ++rank) {
    if (blamed_rank < 0 || static_cast<size_t>(blamed_rank) == rank) worker_up_[rank]->Set(0);
  }
}

}  // namespace tpserve::coordinator
