// GlooCommunicator: worlds of 1-4 ranks as threads on 127.0.0.1 meeting through one
// InMemoryStore. Results are checked against plain sums; faults (a rank that never joins, a
// peer that stops or leaves, Abort from another thread) must end in a Status within the
// timeout, never a hang.
#include "server/comm/gloo_communicator.h"
#include "server/comm/comm_test_util.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tpserve::comm {
namespace {

using testing::Comms;
using testing::OnEveryRank;
using testing::Values;

GlooOptions Options(const std::string& prefix, absl::Duration timeout = absl::Seconds(10)) {
  GlooOptions options;
  options.prefix = prefix;
  options.timeout = timeout;
  return options;
}

// Creates a world of `world` ranks, one thread per rank.
Comms Connect(Store* store, int world, const GlooOptions& options) {
  return testing::Connect(world,
                          [&](int r) { return CreateGlooCommunicator(store, r, world, options); });
}

TEST(GlooCommunicatorTest, AllReduceSumIsCorrectAndBitIdenticalOnEveryRank) {
  InMemoryStore store;
  for (int world = 1; world <= 4; ++world) {
    Comms comms = Connect(&store, world, Options(absl::StrCat("allreduce", world, "/")));
    ASSERT_EQ(comms.size(), world);
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{100003}}) {
      std::vector<std::vector<float>> data(world);
      std::vector<double> want(count, 0.0), magnitude(count, 0.0);
      for (int r = 0; r < world; ++r) {
        data[r] = Values(count, 100 * world + r);
        for (int64_t i = 0; i < count; ++i) {
          want[i] += data[r][i];
          magnitude[i] += std::fabs(data[r][i]);
        }
      }
      std::vector<absl::Status> statuses(world);
      OnEveryRank(world,
                  [&](int r) { statuses[r] = comms[r]->AllReduceSum(data[r].data(), count); });
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(statuses[r].ok()) << statuses[r];
        EXPECT_EQ(std::memcmp(data[r].data(), data[0].data(), count * sizeof(float)), 0)
            << "world " << world << ", count " << count << ": rank " << r << " differs from rank 0";
      }
      // Each of the world - 1 additions rounds once: a few ulps of the magnitudes summed.
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_NEAR(data[0][i], want[i], 4 * world * 6e-8 * magnitude[i])
            << "world " << world << ", count " << count << ", element " << i;
      }
    }
  }
}

// A sum adds the parts in rank order, ((x0 + x1) + x2) + ..., whatever else the buffer holds:
// the parts below round differently in any other order, and each row is reduced alone and in
// buffers of several lengths (a step's batch) with the same bits.
TEST(GlooCommunicatorTest, AllReduceSumAddsInRankOrderWhateverTheBatch) {
  InMemoryStore store;
  for (int world = 2; world <= 4; ++world) {
    Comms comms = Connect(&store, world, Options(absl::StrCat("ordered", world, "/")));
    const std::vector<float> parts = {1e8f, 1.0f, -1e8f, 3.0f};  // part of rank r: parts[r]
    float want = parts[0];
    for (int r = 1; r < world; ++r) want += parts[r];
    for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{17}}) {
      const int64_t count = rows * 576;
      std::vector<std::vector<float>> data(world);
      for (int r = 0; r < world; ++r) data[r].assign(count, parts[r]);
      std::vector<absl::Status> statuses(world);
      OnEveryRank(world,
                  [&](int r) { statuses[r] = comms[r]->AllReduceSum(data[r].data(), count); });
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(statuses[r].ok()) << statuses[r];
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(data[r][i], want)
              << "world " << world << ", " << rows << " rows, rank " << r << ", element " << i;
        }
      }
    }
  }
}

TEST(GlooCommunicatorTest, Int64SumsAreExactOnEveryRank) {
  InMemoryStore store;
  for (int world = 1; world <= 4; ++world) {
    Comms comms = Connect(&store, world, Options(absl::StrCat("int64sum", world, "/")));
    ASSERT_EQ(comms.size(), world);
    testing::ExpectInt64SumsExact(comms, 333);
  }
}

TEST(GlooCommunicatorTest, GathersAreRankMajor) {
  InMemoryStore store;
  for (int world = 1; world <= 4; ++world) {
    Comms comms = Connect(&store, world, Options(absl::StrCat("gather", world, "/")));
    ASSERT_EQ(comms.size(), world);
    testing::ExpectGathersRankMajor(comms, 5, /*gather_leaves_others=*/false);
  }
  Comms comms = Connect(&store, 3, Options("names/"));
  ASSERT_EQ(comms.size(), 3u);
  EXPECT_EQ(comms[0]->rank(), 0);
  EXPECT_EQ(comms[2]->world_size(), 3);
  EXPECT_EQ(comms[1]->backend_name(), "gloo");
}

TEST(GlooCommunicatorTest, ARankThatNeverJoinsFailsCreationWithinTheTimeout) {
  InMemoryStore store;
  constexpr int kWorld = 3;
  const absl::Duration timeout = absl::Seconds(1);
  std::vector<absl::Status> statuses(kWorld - 1);
  std::vector<absl::Duration> took(kWorld - 1);
  OnEveryRank(kWorld - 1, [&](int r) {  // rank 2 never comes
    const absl::Time start = absl::Now();
    statuses[r] = CreateGlooCommunicator(&store, r, kWorld, Options("nojoin/", timeout)).status();
    took[r] = absl::Now() - start;
  });
  for (int r = 0; r < kWorld - 1; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded) << statuses[r];
    EXPECT_NE(statuses[r].message().find("nojoin/2"), absl::string_view::npos) << statuses[r];
    EXPECT_LT(took[r], timeout + absl::Seconds(1)) << "rank " << r;
  }
}

TEST(GlooCommunicatorTest, RejectsBadArguments) {
  InMemoryStore store;
  EXPECT_EQ(CreateGlooCommunicator(&store, 2, 2, Options("bad/")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooCommunicator(nullptr, 0, 1, Options("bad/")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CreateGlooCommunicator(&store, 0, 1, Options("bad/", absl::ZeroDuration())).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(GlooCommunicatorTest, APeerThatStopsParticipatingFailsTheOthersWithinTheTimeout) {
  InMemoryStore store;
  constexpr int kWorld = 3;
  const absl::Duration timeout = absl::Seconds(1);
  Comms comms = Connect(&store, kWorld, Options("stop/", timeout));
  ASSERT_EQ(comms.size(), kWorld);
  std::vector<std::vector<float>> data(kWorld, std::vector<float>(1000, 1.0f));
  std::vector<absl::Status> statuses(kWorld);
  OnEveryRank(kWorld, [&](int r) { statuses[r] = comms[r]->AllReduceSum(data[r].data(), 1000); });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(data[0][999], 3.0f);

  // Rank 2 stays connected but never calls again.
  std::vector<absl::Duration> took(kWorld - 1);
  OnEveryRank(kWorld - 1, [&](int r) {
    const absl::Time start = absl::Now();
    statuses[r] = comms[r]->AllReduceSum(data[r].data(), 1000);
    took[r] = absl::Now() - start;
  });
  for (int r = 0; r < kWorld - 1; ++r) {
    // The rank that times out first closes its connections; the other may see that first.
    EXPECT_TRUE(statuses[r].code() == absl::StatusCode::kDeadlineExceeded ||
                statuses[r].code() == absl::StatusCode::kUnavailable)
        << statuses[r];
    EXPECT_NE(statuses[r].message().find("all_reduce_sum"), absl::string_view::npos);
    EXPECT_NE(statuses[r].message().find(absl::StrCat("rank ", r)), absl::string_view::npos);
    EXPECT_LT(took[r], timeout + absl::Seconds(1)) << "rank " << r;
    // The world is broken: later calls fail at once.
    const absl::Time start = absl::Now();
    EXPECT_FALSE(comms[r]->AllReduceSum(data[r].data(), 1).ok());
    EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
  }
}

TEST(GlooCommunicatorTest, APeerThatLeavesIsUnavailable) {
  InMemoryStore store;
  constexpr int kWorld = 2;
  Comms comms = Connect(&store, kWorld, Options("leave/", absl::Seconds(10)));
  ASSERT_EQ(comms.size(), kWorld);
  comms[1].reset();  // its sockets close
  std::vector<float> data(100, 1.0f);
  const absl::Time start = absl::Now();
  const absl::Status s = comms[0]->AllReduceSum(data.data(), 100);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(GlooCommunicatorTest, AbortFromAnotherThreadUnblocksAnAllReduce) {
  InMemoryStore store;
  constexpr int kWorld = 2;
  Comms comms = Connect(&store, kWorld, Options("abort/", absl::Seconds(30)));
  ASSERT_EQ(comms.size(), kWorld);
  std::vector<float> data(100003, 1.0f);
  absl::Status status;
  absl::Duration took;
  std::thread blocked([&] {  // rank 1 never joins this all-reduce
    const absl::Time start = absl::Now();
    status = comms[0]->AllReduceSum(data.data(), 100003);
    took = absl::Now() - start;
  });
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time abort_time = absl::Now();
  comms[0]->Abort();
  blocked.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_LT(absl::Now() - abort_time, absl::Milliseconds(500));
  EXPECT_LT(took, absl::Seconds(1));
  EXPECT_EQ(comms[0]->AllReduceSum(data.data(), 1).code(), absl::StatusCode::kAborted);
  // The peer's connection to the aborted rank is gone: it fails, promptly.
  const absl::Time start = absl::Now();
  EXPECT_EQ(comms[1]->AllReduceSum(data.data(), 10).code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(GlooCommunicatorTest, APeerWritingToAnAbortedRankSurvivesWithoutSigpipe) {
  InMemoryStore store;
  Comms comms = Connect(&store, 2, Options("sigpipe/", absl::Seconds(5)));
  ASSERT_EQ(comms.size(), 2);
  struct sigaction action = {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &action), 0);
  EXPECT_EQ(action.sa_handler, SIG_IGN);
  comms[0]->Abort();
  // Several large writes into the closed socket: each would raise SIGPIPE if it were not
  // ignored, killing this test process.
  std::vector<float> data(1 << 20, 1.0f);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(comms[1]->AllReduceSum(data.data(), data.size()).ok());
  }
}

TEST(GlooCommunicatorTest, AbortOfAWorldOfOne) {
  InMemoryStore store;
  Comms comms = Connect(&store, 1, Options("one/"));
  ASSERT_EQ(comms.size(), 1);
  float x = 2;
  EXPECT_TRUE(comms[0]->AllReduceSum(&x, 1).ok());
  EXPECT_EQ(x, 2);
  comms[0]->Abort();
  EXPECT_EQ(comms[0]->AllReduceSum(&x, 1).code(), absl::StatusCode::kAborted);
}

TEST(GlooCommunicatorTest, GenerationsWithDifferentPrefixesDoNotMix) {
  InMemoryStore store;
  constexpr int kWorld = 2;
  // Generation 1 comes and goes: its (now stale) addresses stay in the store.
  {
    Comms gen1 = Connect(&store, kWorld, Options("gen1/"));
    ASSERT_EQ(gen1.size(), kWorld);
    ASSERT_TRUE(gen1[0] != nullptr && gen1[1] != nullptr);
  }
  // Generations 2 and 3 meet at once on the same store, rank 1 of each late: each rank 0 must
  // wait for its own generation's rank 1, not use generation 1's.
  std::vector<std::unique_ptr<Communicator>> comms(2 * kWorld);
  std::vector<absl::Status> statuses(2 * kWorld);
  OnEveryRank(2 * kWorld, [&](int i) {
    const int gen = 2 + i / kWorld, rank = i % kWorld;
    if (rank == 1) absl::SleepFor(absl::Milliseconds(200));
    auto comm =
        CreateGlooCommunicator(&store, rank, kWorld, Options(absl::StrCat("gen", gen, "/")));
    statuses[i] = comm.status();
    if (!comm.ok()) return;
    comms[i] = std::move(*comm);
    float x = static_cast<float>(10 * gen + rank);
    statuses[i] = comms[i]->AllReduceSum(&x, 1);
    if (statuses[i].ok() && x != static_cast<float>(20 * gen + 1)) {
      statuses[i] = absl::InternalError(absl::StrCat("generation ", gen, " summed to ", x));
    }
  });
  for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace tpserve::comm
