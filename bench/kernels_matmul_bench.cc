// MatmulF32 throughput on SmolLM2-135M weight shapes, m = 1, 8, 32, 128, 1 and 2 threads.
// Counters: GB/s of weights read (compare with bandwidth_bench at m = 1, where the kernel is
// memory-bound) and GFLOP/s (2 m n k per call; compare with ~190 GFLOP/s peak at large m).
// Weights smaller than the 32 MiB L3 are replicated to >= 256 MiB and cycled, so every call
// streams its weights from DRAM as a real forward pass over 30 distinct layers does.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace {

using tpserve::kernels::cpu::MatmulF32;
using tpserve::kernels::cpu::ThreadPool;

constexpr int64_t kWorkingSetBytes = int64_t{256} << 20;

// Args: n, k (weight [n, k]), m, threads.
void BM_MatmulF32(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const int64_t weight_bytes = n * k * static_cast<int64_t>(sizeof(float));
  const int64_t copies = std::max<int64_t>(1, kWorkingSetBytes / weight_bytes);
  std::vector<float> w(copies * n * k, 0.01f);  // [copies, n, k]
  std::vector<float> x(m * k, 1.0f);            // [m, k]
  std::vector<float> y(m * n);                  // [m, n]
  ThreadPool pool(threads);
  int64_t c = 0;
  for (auto _ : state) {
    MatmulF32(x.data(), w.data() + c * n * k, y.data(), m, n, k, &pool);
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes) * iters / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * iters / 1e9, benchmark::Counter::kIsRate);
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "k", "m", "threads"});
  for (int threads : {1, 2}) {
    for (int64_t m : {1, 8, 32, 128}) {
      b->Args({1536, 576, m, threads});   // w_gate / w_up
      b->Args({576, 1536, m, threads});   // w_down
      b->Args({49152, 576, m, threads});  // LM head
    }
  }
}
BENCHMARK(BM_MatmulF32)->Apply(Shapes)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
