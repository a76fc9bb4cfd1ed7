// Dequantisation throughput per weight type over a 4096 x 4096 tensor of random blocks (with
// finite, sane scales). bytes_per_second counts the f32 output; the "input" counter the
// quantised bytes read.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "server/model/gguf/dequantize.h"
#include "server/model/gguf/ggml_type.h"

namespace tpserve::model {
namespace {

constexpr int64_t kRows = 4096, kCols = 4096;

// A half with value in [2^-10, 2^-7): exponent 5..7, random mantissa.
uint16_t SaneHalf(std::mt19937& rng) {
  return static_cast<uint16_t>(((5 + rng() % 3) << 10) | (rng() & 0x3FF));
}

void PutHalf(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// tensor: [kRows, kCols] of `type`, as random blocks whose scales are finite.
std::vector<uint8_t> RandomTensor(const GgmlTypeInfo& type) {
  std::mt19937 rng(1);
  const int64_t n_blocks = kRows * kCols / type.block_values;
  std::vector<uint8_t> bytes(n_blocks * type.block_bytes);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = bytes.data() + i * type.block_bytes;
    switch (type.type) {
      case GgmlType::kF32: {
        const float f = std::uniform_real_distribution<float>(-1, 1)(rng);
        std::memcpy(blk, &f, 4);
        break;
      }
      case GgmlType::kF16:
        PutHalf(blk, SaneHalf(rng));
        break;
      case GgmlType::kBF16:
        PutHalf(blk, static_cast<uint16_t>(0x3C00 | (rng() & 0x7F)));
        break;
      case GgmlType::kQ4_0:
      case GgmlType::kQ5_0:
      case GgmlType::kQ8_0:
        PutHalf(blk, SaneHalf(rng));
        break;
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1:
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K:
        PutHalf(blk, SaneHalf(rng));
        PutHalf(blk + 2, SaneHalf(rng));
        break;
      case GgmlType::kQ6_K:
        PutHalf(blk + 208, SaneHalf(rng));
        break;
    }
  }
  return bytes;
}

void BM_Dequantize(benchmark::State& state) {
  const GgmlTypeInfo type = *LookupGgmlType(static_cast<uint32_t>(state.range(0)));
  const std::vector<uint8_t> bytes = RandomTensor(type);
  std::vector<float> out(kRows * kCols);  // [kRows, kCols]
  for (auto _ : state) {
    const absl::Status s = DequantizeValues(type, bytes, 0, out.size(), out.data());
    if (!s.ok()) {
      state.SkipWithError(std::string{s.message()}.c_str());
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(type.name));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(out.size() * sizeof(float)));
  state.counters["input"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(bytes.size()),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
}

BENCHMARK(BM_Dequantize)
    ->ArgName("type")
    ->Arg(static_cast<int>(GgmlType::kF32))
    ->Arg(static_cast<int>(GgmlType::kF16))
    ->Arg(static_cast<int>(GgmlType::kBF16))
    ->Arg(static_cast<int>(GgmlType::kQ8_0))
    ->Arg(static_cast<int>(GgmlType::kQ4_0))
    ->Arg(static_cast<int>(GgmlType::kQ4_1))
    ->Arg(static_cast<int>(GgmlType::kQ5_0))
    ->Arg(static_cast<int>(GgmlType::kQ5_1))
    ->Arg(static_cast<int>(GgmlType::kQ4_K))
    ->Arg(static_cast<int>(GgmlType::kQ5_K))
    ->Arg(static_cast<int>(GgmlType::kQ6_K))
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tpserve::model

BENCHMARK_MAIN();
