// File: kernels/cpu/thread_pool.h
//
// ThreadPool owns a fixed set of N-1 worker threads; the calling thread is the N-th worker, so
// a pool of 1 runs everything inline. ParallelFor splits [0, n) by a deterministic static
// partition into N shares (share i is always [n*i/N, n*(i+1)/N)), so the ranges fn sees depend
// only on n and N. Share i is meant for worker i, but a caller that finishes its own share
// runs any share whose worker has not started yet (a worker descheduled on a busy machine, or
// still waking up), so one slow thread does not stall the step. Which thread runs a share
// never changes what is computed. Kernels built on it never split one reduction across
// shares, so their results do not depend on N either.
//
// Thread-safety: ParallelFor may be called by ONE thread at a time (the step loop that owns the
// pool). It is not reentrant: calling ParallelFor from inside fn is a programmer error.
// Idle workers spin briefly (a few tens of microseconds) waiting for the next call, then block,
// so back-to-back calls within a forward pass cost ~1 µs, not a futex wake-up each.
#ifndef TPSERVE_KERNELS_CPU_THREAD_POOL_H_
#define TPSERVE_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tpserve::kernels::cpu {

class ThreadPool {
 public:
  // num_threads >= 1 counts the caller: ThreadPool(2) starts one extra thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint, non-empty ranges covering [0, n); worker i of N gets
  // [n*i/N, n*(i+1)/N) (worker 0 is the caller). Returns when every range is done. n <= 0 is a
  // no-op.
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  // The range worker `index` of `num_workers` gets for n items (the partition ParallelFor uses).
  static void Partition(int64_t n, int index, int num_workers, int64_t* begin, int64_t* end) {
    *begin = n * index / num_workers;
    *end = n * (index + 1) / num_workers;
  }

 private:
  void WorkerLoop(int index);
  // Runs share `index` if no other thread has claimed it; returns whether it ran.
  bool ClaimAndRun(int index);

  const int num_threads_;
  std::vector<std::thread> threads_;

  // The current call, published by bumping generation_ (release) and read by workers after they
  // observe the new generation (acquire).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // shares 1..N-1 of this call not finished yet
  // claimed_[i] != 0 once some thread has taken share i of the current call. Reset (release)
  // after fn_ and n_ are written, so a thread that claims a share sees that call's fn_ and n_.
  std::unique_ptr<std::atomic<int>[]> claimed_;

  // Blocking fallback after spinning. A side that is about to sleep bumps its counter, then
  // re-checks the condition under mu_; the other side changes the condition, then takes mu_ if
  // the counter is non-zero (both sequentially consistent, so one of them sees the other).
  absl::Mutex mu_;
  std::atomic<int> sleeping_workers_{0};
  std::atomic<int> sleeping_caller_{0};
};

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_THREAD_POOL_H_
