// The FFN's elementwise kernels on decode and prefill shapes: SwiGLU (Llama; SmolLM2's FFN of
// 1536) and GeGLU (Gemma 3 270M's FFN of 2048), m = 1, 16, 512 rows of the fused gate+up product,
// and QK-norm over fused QKV rows (Gemma 3 270M: 4 query heads and 1 KV head of 256). Counter:
// GB/s of activations read and written.
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/geglu.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/swiglu.h"

namespace {

namespace k = tpserve::kernels::cpu;

std::vector<float> Values(int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<float>(i % 97) * 0.05f - 2.4f;
  return v;
}

// Args: activation (0 SwiGLU, 1 GeGLU), f, m.
void BM_GatedActivation(benchmark::State& state) {
  const bool gelu = state.range(0) == 1;
  const int64_t f = state.range(1), m = state.range(2);
  const std::vector<float> gate_up = Values(m * 2 * f);  // [m, 2f]
  std::vector<float> out(static_cast<size_t>(m * f));    // [m, f]
  for (auto _ : state) {
    if (gelu) {
      k::GeGlu(gate_up.data(), out.data(), m, f);
    } else {
      k::SwiGlu(gate_up.data(), out.data(), m, f);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(gelu ? "GeGLU" : "SwiGLU");
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) *
                             static_cast<double>(3 * m * f * sizeof(float)) / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GatedActivation)
    ->ArgNames({"gelu", "f", "m"})
    ->ArgsProduct({{0, 1}, {1536, 2048}, {1, 16, 512}});

// Args: m. q's 4 heads and k's 1 of 256, in place in rows of [q | k | v].
void BM_QkNorm(benchmark::State& state) {
  const int64_t m = state.range(0), head_dim = 256, stride = 6 * head_dim;
  std::vector<float> qkv = Values(m * stride);  // [m, stride]
  const std::vector<float> w(static_cast<size_t>(head_dim), 1.0f);
  for (auto _ : state) {
    k::RmsNormHeads(qkv.data(), stride, 4, head_dim, w.data(), 1e-6f, m);
    k::RmsNormHeads(qkv.data() + 4 * head_dim, stride, 1, head_dim, w.data(), 1e-6f, m);
    benchmark::DoNotOptimize(qkv.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(2 * m * 5 * head_dim * 4) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_QkNorm)->ArgName("m")->Arg(1)->Arg(16)->Arg(512);

}  // namespace

BENCHMARK_MAIN();
