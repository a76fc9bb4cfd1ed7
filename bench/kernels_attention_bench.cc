// PagedAttention on the SmolLM2-135M shape (9 query heads, 3 KV heads, head_dim 64, blocks of
// 16): batched decode of many sequences at a given context, and a 128-token prefill, with 1 and
// 2 threads. Counters: GB/s of K/V read (decode is memory-bound on the cache) and GFLOP/s
// (4 * ctx * head_dim per query head and token: QK and PV).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/kv_block.h"

namespace {

using tpserve::kernels::cpu::AttentionSequence;
using tpserve::kernels::cpu::PagedAttentionBatch;
using tpserve::kernels::cpu::PagedKvCache;
using tpserve::kernels::cpu::ThreadPool;

constexpr int64_t kHeads = 9, kKvHeads = 3, kHeadDim = 64, kBlock = tpserve::kKvBlockSize;

// Args: sequences, new tokens per sequence, context per sequence (after the step), threads.
void BM_PagedAttention(benchmark::State& state) {
  const int64_t n_seqs = state.range(0), t = state.range(1), ctx = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const int64_t blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  const int64_t num_blocks = n_seqs * blocks_per_seq;
  std::vector<float> k(num_blocks * kBlock * kKvHeads * kHeadDim, 0.01f);  // [blocks, 16, 3, 64]
  std::vector<float> v(k.size(), 0.02f);
  const PagedKvCache cache{k.data(), v.data(), num_blocks, kBlock, kKvHeads, kHeadDim};
  // Blocks handed out in a shuffled order, as a block manager would after some churn.
  std::vector<int32_t> ids(num_blocks);  // [n_seqs, blocks_per_seq]
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(1));
  std::vector<AttentionSequence> seqs(n_seqs);
  for (int64_t s = 0; s < n_seqs; ++s) {
    seqs[s] = {t, static_cast<int32_t>(ctx - t), ids.data() + s * blocks_per_seq, blocks_per_seq};
  }
  std::vector<float> q(n_seqs * t * kHeads * kHeadDim, 0.1f);  // [sum t, 9, 64]
  std::vector<float> out(q.size());
  ThreadPool pool(threads);
  for (auto _ : state) {
    PagedAttentionBatch(q.data(), seqs.data(), n_seqs, cache, kHeads, 0.125f, out.data(), &pool);
    benchmark::DoNotOptimize(out.data());
  }
  // Positions attended, summed over query tokens (causal within the step).
  double positions = 0;
  for (int64_t i = 0; i < t; ++i) positions += static_cast<double>(ctx - t + i + 1);
  positions *= static_cast<double>(n_seqs);
  const double iters = static_cast<double>(state.iterations());
  const double kv_bytes = static_cast<double>(n_seqs * ctx * kKvHeads * kHeadDim * 2 * 4);
  state.counters["GB/s"] = benchmark::Counter(kv_bytes * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(positions * kHeads * 4.0 * kHeadDim * iters / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"seqs", "t", "ctx", "threads"});
  for (int threads : {1, 2}) {
    b->Args({1, 1, 512, threads});    // decode, one sequence
    b->Args({16, 1, 512, threads});   // decode, 16 streams
    b->Args({32, 1, 2048, threads});  // decode, 32 streams, long context
    b->Args({1, 128, 128, threads});  // 128-token prefill
    b->Args({1, 512, 512, threads});  // 512-token prefill
    b->Args({8, 32, 544, threads});   // 8 questions after a cached 512-token prefix
  }
}
BENCHMARK(BM_PagedAttention)->Apply(Shapes)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
