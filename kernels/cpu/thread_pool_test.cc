#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve::kernels::cpu {
namespace {

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t b, int64_t e) {
        EXPECT_LT(b, e);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPoolTest, StaticPartitionIsDeterministic) {
  ThreadPool pool(3);
  const int64_t n = 10;
  std::vector<int64_t> begins(n, -1), ends(n, -1);
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    begins[b] = b;
    ends[b] = e;
  });
  // Worker i gets [n*i/3, n*(i+1)/3): [0,3), [3,6), [6,10).
  EXPECT_EQ(ends[0], 3);
  EXPECT_EQ(ends[3], 6);
  EXPECT_EQ(ends[6], 10);
  int64_t b, e;
  ThreadPool::Partition(10, 2, 3, &b, &e);
  EXPECT_EQ(b, 6);
  EXPECT_EQ(e, 10);
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  ThreadPool pool(2);
  std::atomic<int> distinct{0};
  const std::thread::id caller = std::this_thread::get_id();
  // Share 0 (always the caller's) is slow, so the worker has long claimed share 1.
  pool.ParallelFor(2, [&](int64_t b, int64_t e) {
    if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (std::this_thread::get_id() != caller) distinct.fetch_add(1);
  });
  EXPECT_EQ(distinct.load(), 1);
}

TEST(ThreadPoolTest, ManyTinyCallsAndSleepWake) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 20000; ++i) {
      pool.ParallelFor(2, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
    }
    // Long enough for the worker to stop spinning and block; the next call must wake it.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(total.load(), 3 * 20000 * 2);
}

TEST(ThreadPoolTest, SlowWorkerMakesCallerBlockAndWake) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  pool.ParallelFor(2, [&](int64_t b, int64_t e) {
    if (b == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), 2);
}

// Whichever thread runs a share (its worker, or the caller when the worker is late), the ranges
// are the static partition.
TEST(ThreadPoolTest, RangesAreStaticWhoeverRunsThem) {
  ThreadPool pool(3);
  std::atomic<int> calls{0};
  for (int round = 0; round < 1000; ++round) {
    std::vector<std::pair<int64_t, int64_t>> ranges(3, {-1, -1});
    pool.ParallelFor(9, [&](int64_t b, int64_t e) {
      ranges[b / 3] = {b, e};
      calls.fetch_add(1);
    });
    EXPECT_EQ(ranges[0], std::make_pair(int64_t{0}, int64_t{3}));
    EXPECT_EQ(ranges[1], std::make_pair(int64_t{3}, int64_t{6}));
    EXPECT_EQ(ranges[2], std::make_pair(int64_t{6}, int64_t{9}));
  }
  EXPECT_EQ(calls.load(), 3000);
}

}  // namespace
}  // namespace tpserve::kernels::cpu
