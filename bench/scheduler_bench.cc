// Scheduler::Schedule + Commit per step, the coordinator's per-iteration bookkeeping: a batch
// of N decoding sequences (steady state), and a KV cache so tight that every step preempts.
// Compare with a worker step (tens of ms on the CPU): this must stay in microseconds.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "kernels/kv_block.h"
#include "server/coordinator/block_manager.h"
#include "server/coordinator/scheduler.h"

namespace tpserve::coordinator {
namespace {

void BM_DecodeSteps(benchmark::State& state) {
  const int64_t n = state.range(0);
  BlockManager blocks(1 << 16, kKvBlockSize);
  Scheduler scheduler({.max_batch_tokens = 8192, .max_running = n}, &blocks);
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int64_t i = 0; i < n; ++i) {
    seqs.push_back(std::make_unique<Sequence>());
    seqs.back()->id = static_cast<uint64_t>(i + 1);
    seqs.back()->prompt.assign(64, 7);
    scheduler.Enqueue(seqs.back().get());
  }
  scheduler.Commit(scheduler.Schedule());  // prefill
  for (auto& s : seqs) s->generated.push_back(1);
  for (auto _ : state) {
    const StepPlan plan = scheduler.Schedule();
    scheduler.Commit(plan);
    for (const PlannedSequence& e : plan.entries) e.seq->generated.push_back(1);
    benchmark::DoNotOptimize(plan.tokens);
    if (seqs[0]->generated.size() > 4000) {  // keep lengths bounded: restart the batch
      state.PauseTiming();
      for (auto& s : seqs) {
        scheduler.Remove(s.get());
        s->generated = {1};
        scheduler.Enqueue(s.get());
      }
      scheduler.Commit(scheduler.Schedule());
      for (auto& s : seqs) s->generated.push_back(1);
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_DecodeSteps)->Arg(1)->Arg(16)->Arg(64)->Arg(256);

void BM_PreemptingSteps(benchmark::State& state) {
  const int64_t n = state.range(0);
  BlockManager blocks(n * 2, kKvBlockSize);  // room for half the batch
  Scheduler scheduler({.max_batch_tokens = 8192, .max_running = n}, &blocks);
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int64_t i = 0; i < n; ++i) {
    seqs.push_back(std::make_unique<Sequence>());
    seqs.back()->id = static_cast<uint64_t>(i + 1);
    seqs.back()->prompt.assign(30, 7);
    scheduler.Enqueue(seqs.back().get());
  }
  int64_t preempted = 0;
  for (auto _ : state) {
    const StepPlan plan = scheduler.Schedule();
    scheduler.Commit(plan);
    preempted += static_cast<int64_t>(plan.preempted.size());
    for (const PlannedSequence& e : plan.entries) {
      if (!e.sample) continue;
      if (e.seq->generated.size() < 40) {
        e.seq->generated.push_back(1);
      } else {  // finished: start over as a new request
        scheduler.Remove(e.seq);
        e.seq->generated.clear();
        scheduler.Enqueue(e.seq);
      }
    }
  }
  state.counters["preempted/step"] =
      benchmark::Counter(static_cast<double>(preempted), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_PreemptingSteps)->Arg(16)->Arg(64);

}  // namespace
}  // namespace tpserve::coordinator
BENCHMARK_MAIN();
