// Test helpers shared by the communicator tests: worlds of ranks as threads, values whose sum
// shows the order of addition, and the all-gather / gather checks every communicator passes.
#ifndef TPSERVE_SERVER_COMM_COMM_TEST_UTIL_H_
#define TPSERVE_SERVER_COMM_COMM_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "server/comm/communicator.h"

namespace tpserve::comm::testing {

using Comms = std::vector<std::unique_ptr<Communicator>>;

// Runs fn(rank) on one thread per rank and joins them.
inline void OnEveryRank(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

// A world of `world` ranks, each made by create(rank) on its own thread (they meet there).
inline Comms Connect(
    int world, const std::function<absl::StatusOr<std::unique_ptr<Communicator>>(int)>& create) {
  Comms comms(world);
  std::vector<absl::Status> statuses(world);
  OnEveryRank(world, [&](int r) {
    auto comm = create(r);
    statuses[r] = comm.status();
    if (comm.ok()) comms[r] = std::move(*comm);
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
  }
  return comms;
}

// Values of very different magnitudes, so that the order of summation shows in the bits.
inline std::vector<float> Values(int64_t count, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-8, 8);
  std::vector<float> v(count);
  for (float& x : v) x = std::ldexp(normal(rng), exponent(rng));
  return v;
}

// AllGather (from a separate input and in place) is rank-major on every rank; Gather fills
// rank 0's output, and, when `gather_leaves_others` (the communicator skips the copies),
// leaves the other ranks' untouched.
inline void ExpectGathersRankMajor(Comms& comms, int64_t count, bool gather_leaves_others) {
  const int world = static_cast<int>(comms.size());
  std::vector<std::vector<float>> all(world, std::vector<float>(world * count, -1));
  std::vector<std::vector<float>> in_place(world, std::vector<float>(world * count, -1));
  std::vector<std::vector<float>> root(world, std::vector<float>(world * count, -1));
  std::vector<absl::Status> statuses(3 * world);
  OnEveryRank(world, [&](int r) {
    std::vector<float> in(count);
    for (int64_t i = 0; i < count; ++i) in[i] = static_cast<float>(10000 * r + i);
    statuses[r] = comms[r]->AllGather(in.data(), count, all[r].data());
    // In place: this rank's values already sit in its slot of the output.
    std::copy(in.begin(), in.end(), in_place[r].begin() + r * count);
    statuses[world + r] =
        comms[r]->AllGather(in_place[r].data() + r * count, count, in_place[r].data());
    statuses[2 * world + r] = comms[r]->Gather(in.data(), count, root[r].data());
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < world; ++r) {
    for (int q = 0; q < world; ++q) {
      for (int64_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(10000 * q + i);
        ASSERT_EQ(all[r][q * count + i], want) << "world " << world << ", rank " << r;
        ASSERT_EQ(in_place[r][q * count + i], want) << "world " << world << ", rank " << r;
        if (r == 0) ASSERT_EQ(root[r][q * count + i], want) << "world " << world;
        if (r > 0 && gather_leaves_others) {
          ASSERT_EQ(root[r][q * count + i], -1) << "Gather writes rank 0's output only";
        }
      }
    }
  }
}

// AllReduceSumInt64 gives every rank the exact (wrapping) int64 sum of all ranks' parts, for
// values of every size and sign, counts in and past one chunk.
inline void ExpectInt64SumsExact(Comms& comms, int64_t count) {
  const int world = static_cast<int>(comms.size());
  std::vector<std::vector<int64_t>> data(world);
  std::vector<uint64_t> want(count, 0);
  for (int r = 0; r < world; ++r) {
    std::mt19937_64 rng(77 + r);
    data[r].resize(count);
    for (int64_t i = 0; i < count; ++i) {
      const int shift = static_cast<int>(rng() % 64);
      data[r][i] = static_cast<int64_t>(rng() >> shift) * (i % 2 == 0 ? 1 : -1);
      if (i == 0) data[r][i] = INT64_MAX;  // wraps past two ranks
      want[i] += static_cast<uint64_t>(data[r][i]);
    }
  }
  std::vector<absl::Status> statuses(world);
  OnEveryRank(world,
              [&](int r) { statuses[r] = comms[r]->AllReduceSumInt64(data[r].data(), count); });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(static_cast<uint64_t>(data[r][i]), want[i])
          << "world " << world << ", rank " << r << ", element " << i;
    }
  }
}

}  // namespace tpserve::comm::testing

#endif  // TPSERVE_SERVER_COMM_COMM_TEST_UTIL_H_
