// Memory read bandwidth of this machine: an AVX2 sum over a 512 MB buffer with 1 and 2 threads.
// The yardstick for the memory-bound kernels (matmul at m = 1): quote their GB/s as a ratio of
// this figure, measured in the same session.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/thread_pool.h"

namespace {

using tpserve::kernels::cpu::ThreadPool;

constexpr int64_t kBufferBytes = int64_t{512} << 20;

// Sum of x[0..n) with four independent accumulators (enough loads in flight to saturate DRAM).
// bench/ is built without the kernels' -mavx2, hence the per-function target.
[[gnu::target("avx2")]] float Sum(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(x + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(x + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(x + i + 24));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float l : lanes) total += l;
  return total;
}

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t n = kBufferBytes / static_cast<int64_t>(sizeof(float));
  // [n] floats, 64-byte aligned, touched once so pages are mapped before timing.
  float* buf = static_cast<float*>(std::aligned_alloc(64, kBufferBytes));
  for (int64_t i = 0; i < n; ++i) buf[i] = 1.0f;
  ThreadPool pool(threads);
  std::vector<float> partial(threads);
  // Chunks of 1 MiB so the static partition hands each thread a contiguous half.
  const int64_t chunk = (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float));
  for (auto _ : state) {
    pool.ParallelFor(threads, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t begin = n / threads * t;
        partial[t] = Sum(buf + begin, n / threads / chunk * chunk);
      }
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(kBufferBytes) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
  std::free(buf);
}
BENCHMARK(BM_ReadBandwidth)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
