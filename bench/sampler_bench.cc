// Sampling per decode step at batch 16: Sampler::Sample on 16 rows of logits, for SmolLM2's
// vocabulary (49,152) and Gemma 3's (262,144), greedy and with the truncations users set
// (top-k 40; top-p 0.9; min-p 0.05; temperature 0.8 throughout), with and without 5 logprobs
// and a repetition penalty over a 512-token history. Logits are a fixed pseudo-random
// draw with a realistic spread (a few tokens far above the rest). Counter: steps/s.
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "server/engine/sampler.h"

namespace {

namespace e = tpserve::engine;

constexpr int kBatch = 16;

std::vector<float> Logits(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& l : logits) l = noise(rng);
  for (int i = 0; i < 20; ++i) logits[rng() % vocab] += 12.0f;  // the plausible few
  return logits;
}

// Args: vocab, mode (0 greedy, 1 top-k 40, 2 top-p 0.9, 3 min-p 0.05), logprobs, penalty.
void BM_SampleStep(benchmark::State& state) {
  const int64_t vocab = state.range(0);
  const int64_t mode = state.range(1);
  e::SamplingParams params;
  params.temperature = mode == 0 ? 0.0f : 0.8f;
  if (mode == 1) params.top_k = 40;
  if (mode == 2) params.top_p = 0.9f;
  if (mode == 3) params.min_p = 0.05f;
  params.logprobs = static_cast<uint32_t>(state.range(2));
  if (state.range(3) != 0) params.repetition_penalty = 1.1f;
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < kBatch; ++r) rows.push_back(Logits(vocab, 1 + static_cast<uint32_t>(r)));
  std::vector<int32_t> history(512);
  for (size_t i = 0; i < history.size(); ++i) history[i] = static_cast<int32_t>(i * 97 % vocab);
  e::Sampler sampler;
  uint64_t index = 0;
  for (auto _ : state) {
    for (int r = 0; r < kBatch; ++r) {
      benchmark::DoNotOptimize(sampler.Sample(rows[r], params, {history, {}}, index));
    }
    ++index;
  }
  state.counters["steps/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SampleStep)
    ->ArgNames({"vocab", "mode", "logprobs", "penalty"})
    ->ArgsProduct({{49152, 262144}, {0, 1, 2, 3}, {0, 5}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
