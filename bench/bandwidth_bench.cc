// Memory read bandwidth of this machine: an AVX2 sum over a 512 MB buffer with 1 and 2 threads,
// plain (nta_ahead 0) and prefetched non-temporally some bytes ahead. The yardstick for the
// memory-bound kernels (matmul at m = 1): quote their GB/s as a ratio of the best of these
// figures, measured in the same session.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/thread_pool.h"

namespace {

using tpserve::kernels::cpu::ThreadPool;

constexpr int64_t kBufferBytes = int64_t{512} << 20;

// Sum of x[0..n) with four independent accumulators (enough loads in flight to saturate DRAM),
// optionally prefetching `ahead` bytes ahead with the non-temporal hint, as the decode tiles do
// (quant/interleaved8.h): lines read once then skip the write-back into the L3 on eviction.
// bench/ is built without the kernels' -mavx2, hence the per-function target.
[[gnu::target("avx2")]] float Sum(const float* x, int64_t n, int64_t ahead) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    if (ahead > 0) {
      const char* line = reinterpret_cast<const char*>(x + i) + ahead;
      _mm_prefetch(line, _MM_HINT_NTA);
      _mm_prefetch(line + 64, _MM_HINT_NTA);
    }
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
  const int64_t ahead = state.range(1);
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
        const int64_t count = n / threads / chunk * chunk;
        partial[t] = Sum(buf + begin, count, ahead);
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
    ->ArgNames({"threads", "nta_ahead"})
    ->ArgsProduct({{1, 2}, {0, 512, 2048, 4096}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
