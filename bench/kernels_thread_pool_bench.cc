// ThreadPool::ParallelFor per-call overhead with a trivial body (a forward pass makes ~10 calls
// per layer per token, so this must stay around a microsecond).
#include <atomic>
#include <cstdint>

#include "benchmark/benchmark.h"
#include "kernels/cpu/thread_pool.h"

namespace {

using tpserve::kernels::cpu::ThreadPool;

void BM_ParallelForOverhead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  ThreadPool pool(threads);
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    pool.ParallelFor(
        threads, [&](int64_t b, int64_t e) { sink.fetch_add(e - b, std::memory_order_relaxed); });
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_ParallelForOverhead)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
