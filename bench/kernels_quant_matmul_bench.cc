// QuantMatmul throughput on SmolLM2-135M weight shapes, weights kept in their blocks (Q4_1,
// Q8_0, Q5_0, Q5_1), per instruction set of the integer tiles (AVX2, AVX-512 VNNI where the machine
// has it), m = 1, 16, 128, 1 and 2 threads. Counters: GB/s of weights read (m = 1 streams them from
// DRAM: compare with bandwidth_bench) and GMAC/s (m n k per call). Weights smaller than the 32 MiB
// L3 are replicated to >= 256 MiB and cycled, as a forward pass over 30 layers.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/quant_matmul.h"
#include "kernels/cpu/quant/weight_layout.h"
#include "kernels/cpu/thread_pool.h"

namespace {

namespace k = tpserve::kernels::cpu;

constexpr int64_t kWorkingSetBytes = int64_t{256} << 20;

// n rows of k values of `format` with random quants and scales of about 0.01 (f16 0x211F);
// Q4_1's and Q5_1's mins at -0.08 (0xAD1F).
std::vector<uint8_t> RandomWeights(k::WeightFormat format, int64_t rows, int64_t cols) {
  const k::FormatKernels& f = k::FormatKernelsFor(format);
  std::vector<uint8_t> w(static_cast<size_t>(rows * k::RowBytes(format, cols)));
  std::mt19937 rng(7);
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  const uint16_t d = 0x211F, m = 0xAD1F;
  for (size_t off = 0; off < w.size(); off += static_cast<size_t>(f.block_bytes)) {
    std::memcpy(&w[off], &d, 2);
    if (format == k::WeightFormat::kQ4_1 || format == k::WeightFormat::kQ5_1) {
      std::memcpy(&w[off + 2], &m, 2);
    }
  }
  return w;
}

// Args: format, isa, n, k (weight [n, k]), m, threads, sums (0: QuantMatmul's float chain; G > 0:
// QuantMatmulFixed's exact sums in granules of G blocks, the canonical path's row-parallel
// product, SmolLM2's down projection taking G = 4 and its attention output G = 2).
void BM_QuantMatmul(benchmark::State& state) {
  const auto format = static_cast<k::WeightFormat>(state.range(0));
  const auto isa = static_cast<k::QuantIsa>(state.range(1));
  const int64_t n = state.range(2), cols = state.range(3), m = state.range(4);
  const int threads = static_cast<int>(state.range(5));
  const int64_t fixed_granule = state.range(6);
  const bool fixed = fixed_granule != 0;
  if (fixed && !k::HasFixedSums(format)) {
    state.SkipWithError("no exact sums for this format");
    return;
  }
  if (fixed && cols / 32 % fixed_granule != 0) {
    state.SkipWithError("k is not whole granules");
    return;
  }
  if (isa == k::QuantIsa::kAvx512Vnni && k::BestQuantIsa() != k::QuantIsa::kAvx512Vnni) {
    state.SkipWithError("no AVX-512 VNNI on this machine");
    return;
  }
  // In the kernel layout (weight_layout.h: Q8_0 interleaved), as a worker holds them.
  const int64_t weight_bytes = k::LayoutBytes(format, n, cols);
  const int64_t copies = std::max<int64_t>(1, kWorkingSetBytes / weight_bytes);
  const std::vector<uint8_t> rows = RandomWeights(format, n, cols);
  std::vector<uint8_t> w(static_cast<size_t>(copies * weight_bytes));  // [copies, layout]
  k::ToLayout(format, rows.data(), n, cols, w.data());
  for (int64_t c = 1; c < copies; ++c) {
    std::memcpy(w.data() + c * weight_bytes, w.data(), static_cast<size_t>(weight_bytes));
  }
  std::vector<float> x(static_cast<size_t>(m * cols));  // [m, k]
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(m * n));       // [m, n]
  std::vector<int64_t> sums(static_cast<size_t>(m * n));  // [m, n] (fixed)
  k::ThreadPool pool(threads);
  k::QuantScratch scratch;
  int64_t c = 0;
  for (auto _ : state) {
    if (fixed) {
      k::QuantMatmulFixed(format, x.data(), w.data() + c * weight_bytes, sums.data(), m, n, cols,
                          fixed_granule, &pool, &scratch, isa);
      benchmark::DoNotOptimize(sums.data());
    } else {
      k::QuantMatmul(format, x.data(), w.data() + c * weight_bytes, y.data(), m, n, cols, &pool,
                     &scratch, isa);
      benchmark::DoNotOptimize(y.data());
    }
    c = (c + 1) % copies;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes) * iters / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(m * n * cols) * iters / 1e9,
                                                benchmark::Counter::kIsRate);
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"format", "isa", "n", "k", "m", "threads", "sums"});
  for (k::WeightFormat format : {k::WeightFormat::kQ4_1, k::WeightFormat::kQ8_0,
                                 k::WeightFormat::kQ5_0, k::WeightFormat::kQ5_1}) {
    for (k::QuantIsa isa : {k::QuantIsa::kAvx2, k::QuantIsa::kAvx512Vnni}) {
      for (int threads : {1, 2}) {
        for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 128}) {
          for (auto [n, cols] : {std::pair<int64_t, int64_t>{1536, 576},  // w_gate / w_up
                                 {576, 1536},                             // w_down
                                 {576, 576}}) {                           // wo
            for (int64_t sums : {0, 1, 2, 4}) {
              b->Args({static_cast<int64_t>(format), static_cast<int64_t>(isa), n, cols, m, threads,
                       sums});
            }
          }
        }
      }
    }
  }
}
BENCHMARK(BM_QuantMatmul)->Apply(Shapes)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
