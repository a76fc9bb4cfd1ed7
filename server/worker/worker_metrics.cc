#include "server/worker/worker_metrics.h"

#include <string>

#include "server/common/metrics_server.h"

namespace tpserve::worker {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

WorkerMetrics::WorkerMetrics(prometheus::Registry& r)
    : step_duration_(BuildHistogram()
                         .Name("tpserve_worker_step_duration_seconds")
                         .Help("One step on this worker: forward pass, collectives, sampling")
                         .Register(r)),
      allreduce_duration_(BuildHistogram()
                              .Name("tpserve_worker_allreduce_duration_seconds")
                              .Help("One all-reduce across the world")
                              .Register(r)),
      allreduce_bytes_(BuildCounter()
                           .Name("tpserve_worker_allreduce_bytes_total")
                           .Help("Bytes this rank contributed to all-reduces")
                           .Register(r)),
      weight_bytes_(BuildGauge()
                        .Name("tpserve_worker_weight_bytes")
                        .Help("Resident weight bytes of this rank's shard")
                        .Register(r)),
      kv_cache_bytes_(BuildGauge()
                          .Name("tpserve_worker_kv_cache_bytes")
                          .Help("KV cache bytes allocated on this rank")
                          .Register(r)),
      threads_(BuildGauge()
                   .Name("tpserve_worker_threads")
                   .Help("Compute threads of this rank")
                   .Register(r)),
      communicator_(BuildGauge()
                        .Name("tpserve_worker_communicator_info")
                        .Help("1 for the communicator this rank's world uses (backend label)")
                        .Register(r)) {}

WorkerMetrics::Rank WorkerMetrics::ForRank(int rank) {
  const std::map<std::string, std::string> labels = {{"rank", std::to_string(rank)}};
  // Shared-memory all-reduces take microseconds: buckets from 5 µs.
  return {step_duration_.Add(labels, LatencyBuckets()),
          allreduce_duration_.Add(labels, FineLatencyBuckets(5e-6)),
          allreduce_bytes_.Add(labels),
          weight_bytes_.Add(labels),
          kv_cache_bytes_.Add(labels),
          threads_.Add(labels)};
}

void WorkerMetrics::SetCommunicator(int rank, const std::string& backend) {
  for (const char* known : {"shm", "gloo", "nccl", "local"}) {
    communicator_.Add({{"rank", std::to_string(rank)}, {"backend", known}})
        .Set(backend == known ? 1 : 0);
  }
}

}  // namespace tpserve::worker
