// ShmCommunicator: worlds of 1-4 ranks as threads (each maps the segment itself, as separate
// processes do) and, for a peer that dies, as a forked process. Results are checked bit for bit
// against the rank-ordered sum and against Gloo at two ranks; faults (a rank that never comes,
// Abort from another thread, a killed peer) must end in a Status well within the timeout.
#include "server/comm/shm/shm_communicator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/cpu/reference/add.h"
#include "server/comm/comm_test_util.h"
#include "server/comm/gloo_communicator.h"

namespace tpserve::comm {
namespace {

using testing::Comms;
using testing::OnEveryRank;
using testing::Values;

ShmOptions Options(const std::string& prefix, absl::Duration timeout = absl::Seconds(10)) {
  ShmOptions options;
  options.prefix = prefix;
  options.timeout = timeout;
  options.slot_bytes = 4096;  // 1024 floats: larger collectives run in chunks
  return options;
}

Comms Connect(Store* store, int world, const ShmOptions& options) {
  return testing::Connect(world,
                          [&](int r) { return CreateShmCommunicator(store, r, world, options); });
}

int SegmentsOfThisProcess() {
  int n = 0;
  const std::string mine = absl::StrCat(".", getpid(), ".");
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string f = e.path().filename().string();
    if (f.rfind("tpserve-shm.", 0) == 0 && f.find(mine) != std::string::npos) ++n;
  }
  return n;
}

TEST(ShmCommunicatorTest, AllReduceSumAddsInRankOrderBitIdenticalOnEveryRank) {
  InMemoryStore store;
  for (int world = 1; world <= 4; ++world) {
    Comms comms = Connect(&store, world, Options(absl::StrCat("allreduce", world, "/")));
    ASSERT_EQ(comms.size(), world);
    EXPECT_EQ(comms[0]->backend_name(), "shm");
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1024}, int64_t{100003}}) {
      std::vector<std::vector<float>> data(world);
      std::vector<const float*> parts;
      for (int r = 0; r < world; ++r) data[r] = Values(count, 100 * world + r);
      for (int r = 0; r < world; ++r) parts.push_back(data[r].data());
      std::vector<float> want(count);
      kernels::cpu::reference::SumInOrder(parts.data(), world, want.data(), count);
      std::vector<absl::Status> statuses(world);
      OnEveryRank(world,
                  [&](int r) { statuses[r] = comms[r]->AllReduceSum(data[r].data(), count); });
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(statuses[r].ok()) << statuses[r];
        EXPECT_EQ(std::memcmp(data[r].data(), want.data(), count * sizeof(float)), 0)
            << "world " << world << ", count " << count << ", rank " << r;
      }
    }
  }
  EXPECT_EQ(SegmentsOfThisProcess(), 0) << "every segment is unlinked once mapped";
}

TEST(ShmCommunicatorTest, Int64SumsAreExactOnEveryRank) {
  InMemoryStore store;
  for (int world = 1; world <= 4; ++world) {
    Comms comms = Connect(&store, world, Options(absl::StrCat("int64sum", world, "/")));
    ASSERT_EQ(comms.size(), world);
    for (int64_t count : {int64_t{1}, int64_t{9}, int64_t{1500}}) {  // 1500: chunks
      testing::ExpectInt64SumsExact(comms, count);
    }
  }
}

TEST(ShmCommunicatorTest, GathersAreRankMajorAndGatherFillsRankZeroOnly) {
  InMemoryStore store;
  for (int world = 1; world <= 4; ++world) {
    Comms comms = Connect(&store, world, Options(absl::StrCat("gather", world, "/")));
    ASSERT_EQ(comms.size(), world);
    testing::ExpectGathersRankMajor(comms, 2500, /*gather_leaves_others=*/true);  // 3 chunks
  }
}

// Ranks > 0 leave a Gather without waiting: they run ahead into the next collectives, and
// must not overwrite a slot rank 0 is still reading.
TEST(ShmCommunicatorTest, ManyMixedCollectivesBackToBack) {
  InMemoryStore store;
  constexpr int kWorld = 3;
  Comms comms = Connect(&store, kWorld, Options("mixed/"));
  ASSERT_EQ(comms.size(), kWorld);
  constexpr int kRounds = 3000;
  std::vector<int> errors(kWorld, 0);
  OnEveryRank(kWorld, [&](int r) {
    std::vector<float> x(700), gathered(kWorld * 700);
    for (int round = 0; round < kRounds; ++round) {
      for (int64_t i = 0; i < 700; ++i) x[i] = static_cast<float>(round * 10 + r + i);
      if (!comms[r]->Gather(x.data(), 700, gathered.data()).ok()) ++errors[r];
      if (r == 0) {
        for (int q = 0; q < kWorld; ++q) {
          if (gathered[q * 700 + 5] != static_cast<float>(round * 10 + q + 5)) ++errors[r];
        }
      }
      std::fill(x.begin(), x.end(), static_cast<float>(round + r));
      if (!comms[r]->AllReduceSum(x.data(), round % 2 == 0 ? 700 : 3).ok()) ++errors[r];
      if (x[1] != static_cast<float>(3 * round + 3)) ++errors[r];
      // The canonical path's int64 sums between them: 900 values are two chunks of a slot.
      std::vector<int64_t> sums(round % 3 == 0 ? 900 : 5, int64_t{round} * 1000 + r);
      if (!comms[r]->Gather(x.data(), 700, gathered.data()).ok()) ++errors[r];
      if (!comms[r]->AllReduceSumInt64(sums.data(), static_cast<int64_t>(sums.size())).ok()) {
        ++errors[r];
      }
      if (sums.back() != int64_t{round} * 3000 + 3) ++errors[r];
    }
  });
  EXPECT_EQ(errors, std::vector<int>(kWorld, 0));
}

TEST(ShmCommunicatorTest, SameBitsAsGlooAtTwoRanks) {
  InMemoryStore store;
  Comms shm = Connect(&store, 2, Options("vs-gloo-shm/"));
  Comms gloo(2);
  OnEveryRank(2, [&](int r) {
    GlooOptions options;
    options.prefix = "vs-gloo-gloo/";
    gloo[r] = *CreateGlooCommunicator(&store, r, 2, options);
  });
  constexpr int64_t kCount = 576 * 32;
  std::vector<std::vector<float>> a(2), b(2);
  for (int r = 0; r < 2; ++r) a[r] = b[r] = Values(kCount, 7 + r);
  OnEveryRank(2, [&](int r) {
    ASSERT_TRUE(shm[r]->AllReduceSum(a[r].data(), kCount).ok());
    ASSERT_TRUE(gloo[r]->AllReduceSum(b[r].data(), kCount).ok());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(std::memcmp(a[r].data(), b[r].data(), kCount * sizeof(float)), 0) << "rank " << r;
  }
}

TEST(ShmCommunicatorTest, APeerThatNeverArrivesIsADeadlineAndBreaksTheWorld) {
  InMemoryStore store;
  Comms comms = Connect(&store, 2, Options("late/", absl::Milliseconds(300)));
  ASSERT_EQ(comms.size(), 2);
  std::vector<float> x(10, 1.0f);
  const absl::Time start = absl::Now();
  const absl::Status status = comms[0]->AllReduceSum(x.data(), 10);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_NE(status.message().find("rank 1 did not arrive"), std::string::npos) << status;
  // The late rank finds the world broken at once, and rank 0 keeps its first error.
  const absl::Status late = comms[1]->AllReduceSum(x.data(), 10);
  EXPECT_EQ(late.code(), absl::StatusCode::kUnavailable) << late;
  EXPECT_NE(late.message().find("broken: rank 0"), std::string::npos) << late;
  EXPECT_EQ(comms[0]->AllReduceSum(x.data(), 10).code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(ShmCommunicatorTest, AbortFromAnotherThreadWakesAWaitingRankAndItsPeers) {
  InMemoryStore store;
  Comms comms = Connect(&store, 3, Options("abort/", absl::Seconds(30)));
  ASSERT_EQ(comms.size(), 3);
  std::vector<absl::Status> statuses(2);
  const absl::Time start = absl::Now();
  std::thread waiting([&] {
    OnEveryRank(2, [&](int r) {
      std::vector<float> x(10, 1.0f);
      statuses[r] = comms[r]->AllReduceSum(x.data(), 10);  // rank 2 never comes
    });
  });
  absl::SleepFor(absl::Milliseconds(100));
  comms[0]->Abort();
  waiting.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "Abort must not wait out the timeout";
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kAborted) << statuses[0];
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kUnavailable) << statuses[1];
  std::vector<float> x(10);
  EXPECT_EQ(comms[0]->AllGather(x.data(), 1, x.data()).code(), absl::StatusCode::kAborted);
}

TEST(ShmCommunicatorTest, RefusesBadArguments) {
  InMemoryStore store;
  EXPECT_EQ(CreateShmCommunicator(&store, 2, 2, Options("bad/")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateShmCommunicator(nullptr, 0, 1, Options("bad/")).status().code(),
            absl::StatusCode::kInvalidArgument);
  ShmOptions odd = Options("bad/");
  odd.slot_bytes = 100;
  EXPECT_EQ(CreateShmCommunicator(&store, 0, 1, odd).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store.Set("evil/shm/segment", "/etc/passwd").ok());
  EXPECT_EQ(CreateShmCommunicator(&store, 1, 2, Options("evil/")).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a peer's segment name is never a path";
  ASSERT_TRUE(store.Set("gone/shm/segment", "/tpserve-shm.1.1.feed").ok());
  EXPECT_EQ(CreateShmCommunicator(&store, 1, 2, Options("gone/")).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A Store over files in a directory, so that a forked process can meet its parent.
class DirStore final : public Store {
 public:
  explicit DirStore(std::string dir) : dir_(std::move(dir)) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    const std::string tmp = Path(key) + ".tmp";
    std::ofstream(tmp) << value;
    std::filesystem::rename(tmp, Path(key));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    if (absl::Status s = Wait({key}, timeout); !s.ok()) return s;
    std::stringstream text;
    text << std::ifstream(Path(key)).rdbuf();
    return text.str();
  }
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    for (const std::string& key : keys) {
      while (!std::filesystem::exists(Path(key))) {
        if (absl::Now() > deadline) return absl::DeadlineExceededError(key);
        absl::SleepFor(absl::Milliseconds(2));
      }
    }
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> Add(const std::string&, int64_t) override {
    return absl::UnimplementedError("Add");
  }

 private:
  std::string Path(std::string key) const {
    std::replace(key.begin(), key.end(), '/', '_');
    return dir_ + "/" + key;
  }
  const std::string dir_;
};

TEST(ShmCommunicatorTest, AKilledPeerProcessIsSeenWithinTheLivenessCheck) {
  char dir_template[] = "/tmp/shm_store_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  DirStore store(dir_template);
  ShmOptions options = Options("killed/", absl::Seconds(30));
  options.liveness_check = absl::Milliseconds(50);
  const pid_t child = fork();
  if (child == 0) {
    // Rank 1: one collective with the parent, then dies without a word.
    auto comm = CreateShmCommunicator(&store, 1, 2, options);
    std::vector<float> x(10, 2.0f);
    if (comm.ok()) (void)(*comm)->AllReduceSum(x.data(), 10);
    kill(getpid(), SIGKILL);
  }
  auto comm = CreateShmCommunicator(&store, 0, 2, options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> x(10, 1.0f);
  ASSERT_TRUE((*comm)->AllReduceSum(x.data(), 10).ok());
  EXPECT_EQ(x[3], 3.0f);
  std::thread reaper([child] { waitpid(child, nullptr, 0); });
  const absl::Time start = absl::Now();
  const absl::Status status = (*comm)->AllReduceSum(x.data(), 10);
  reaper.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("rank 1 (pid"), std::string::npos) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  std::filesystem::remove_all(dir_template);
}

}  // namespace
}  // namespace tpserve::comm
