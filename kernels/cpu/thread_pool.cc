#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>

#include "glog/logging.h"

namespace tpserve::kernels::cpu {
namespace {

// ~20-60 µs of spinning (a pause is ~10-40 ns depending on the core) before blocking.
constexpr int kSpinIterations = 2000;

}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads), claimed_(new std::atomic<int>[num_threads]) {
  CHECK_GE(num_threads, 1);
  for (int i = 0; i < num_threads; ++i) claimed_[i].store(1, std::memory_order_relaxed);
  threads_.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) threads_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  {
    absl::MutexLock lock(&mu_);  // wakes any sleeping worker (conditions re-evaluated on unlock)
  }
  for (std::thread& t : threads_) t.join();
}

bool ThreadPool::ClaimAndRun(int index) {
  if (claimed_[index].exchange(1, std::memory_order_acq_rel) != 0) return false;
  int64_t begin, end;
  Partition(n_, index, num_threads_, &begin, &end);
  if (begin < end) (*fn_)(begin, end);
  return true;
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  if (num_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  CHECK_EQ(pending_.load(std::memory_order_relaxed), 0) << "ParallelFor is not reentrant";
  fn_ = &fn;
  n_ = n;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  // Every share of the previous call was claimed (1) before it returned; reopen them.
  for (int i = 1; i < num_threads_; ++i) claimed_[i].store(0, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes fn_, n_, pending_
  if (sleeping_workers_.load(std::memory_order_seq_cst) > 0) {
    absl::MutexLock lock(&mu_);  // sleepers' Await conditions are re-evaluated on unlock
  }

  int64_t begin, end;
  Partition(n, 0, num_threads_, &begin, &end);
  if (begin < end) fn(begin, end);
  // Shares whose worker has not started yet are run here.
  for (int i = 1; i < num_threads_; ++i) {
    if (ClaimAndRun(i)) pending_.fetch_sub(1, std::memory_order_acq_rel);
  }

  for (int i = 0; i < kSpinIterations; ++i) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    _mm_pause();
  }
  absl::MutexLock lock(&mu_);
  sleeping_caller_.fetch_add(1, std::memory_order_seq_cst);
  mu_.Await(absl::Condition(
      +[](std::atomic<int>* p) { return p->load(std::memory_order_acquire) == 0; }, &pending_));
  sleeping_caller_.fetch_sub(1, std::memory_order_relaxed);
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpinIterations && g == seen; ++i) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      absl::MutexLock lock(&mu_);
      sleeping_workers_.fetch_add(1, std::memory_order_seq_cst);
      struct Arg {
        std::atomic<uint64_t>* generation;
        uint64_t seen;
      } arg{&generation_, seen};
      mu_.Await(absl::Condition(
          +[](Arg* a) { return a->generation->load(std::memory_order_seq_cst) != a->seen; }, &arg));
      sleeping_workers_.fetch_sub(1, std::memory_order_relaxed);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    if (!ClaimAndRun(index)) continue;  // the caller ran it
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        sleeping_caller_.load(std::memory_order_seq_cst) > 0) {
      absl::MutexLock lock(&mu_);  // wakes the caller
    }
  }
}

}  // namespace tpserve::kernels::cpu
