#include "server/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/cuda/cuda_test_util.h"
#include "server/comm/store.h"

namespace tpserve::comm {
namespace {

using ::tpserve::cuda::testing::VisibleGpus;
// Device buffers whose copies wait for the device (see DeviceArray).
using DeviceBuffer = ::tpserve::cuda::testing::DeviceArray<float>;

#define SKIP_WITHOUT_GPUS(n)                                                            \
  do {                                                                                  \
    const int gpus = VisibleGpus();                                                     \
    if (gpus == 0) GTEST_SKIP() << "no GPU visible";                                    \
    if (gpus < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, " << gpus << " visible"; \
  } while (0)

// Holds a stream back until opened: a stand-in for a peer that never arrives.
struct StreamGate {
  std::atomic<bool> open{false};
  static void CUDART_CB Wait(void* arg) {
    while (!static_cast<StreamGate*>(arg)->open.load()) absl::SleepFor(absl::Milliseconds(1));
  }
};

NcclOptions Options(int device, absl::Duration timeout = absl::Seconds(30)) {
  NcclOptions options;
  options.device = device;
  options.timeout = timeout;
  options.prefix = "gen1/";
  return options;
}

// Creates the ranks of a world of `n` (one thread and one GPU per rank) together.
std::vector<std::unique_ptr<Communicator>> CreateWorld(InMemoryStore* store, int n) {
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = CreateNcclCommunicator(store, r, n, Options(r));
      ASSERT_TRUE(comm.ok()) << comm.status();
      comms[r] = std::move(*comm);
    });
  }
  for (std::thread& t : threads) t.join();
  return comms;
}

// Runs fn(rank, comm) for every rank at once, each on a thread bound to its GPU.
template <typename Fn>
void OnEveryRank(std::vector<std::unique_ptr<Communicator>>& comms, Fn fn) {
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  for (int r = 0; r < static_cast<int>(comms.size()); ++r) {
    threads.emplace_back([&, r] {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      fn(r, *comms[r]);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Destroys the ranks together, as separate processes would: finalizing may need the peers.
void DestroyWorld(std::vector<std::unique_ptr<Communicator>>& comms) {
  OnEveryRank(comms, [&](int r, Communicator&) { comms[r].reset(); });
}

// Checks all-reduce, all-gather, broadcast and barrier over a world of `n` GPUs.
void CheckCollectives(int n) {
  InMemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms = CreateWorld(&store, n);
  for (const auto& c : comms) ASSERT_NE(c, nullptr);
  constexpr int64_t kCount = 4099;  // odd, not a multiple of any vector width
  OnEveryRank(comms, [&](int r, Communicator& comm) {
    EXPECT_EQ(comm.rank(), r);
    EXPECT_EQ(comm.world_size(), n);
    EXPECT_EQ(comm.backend_name(), "nccl");

    // All-reduce: rank r holds (r + 1) * (i % 7 + 1); small integers, so the sum is exact.
    DeviceBuffer data(kCount);
    std::vector<float> host(kCount);
    for (int64_t i = 0; i < kCount; ++i) host[i] = static_cast<float>((r + 1) * (i % 7 + 1));
    data.Upload(host);
    ASSERT_TRUE(comm.AllReduceSum(data.data(), kCount).ok());
    std::vector<float> sum = data.Download();
    const int ranks_sum = n * (n + 1) / 2;  // 1 + 2 + ... + n
    for (int64_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(sum[i], static_cast<float>(ranks_sum * (i % 7 + 1))) << "i=" << i;
    }

    // All-gather: out [n * kCount], rank-major.
    DeviceBuffer in(kCount);
    DeviceBuffer out(n * kCount);
    for (int64_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(r * 10000 + i);
    in.Upload(host);
    ASSERT_TRUE(comm.AllGather(in.data(), kCount, out.data()).ok());
    std::vector<float> gathered = out.Download();
    for (int src = 0; src < n; ++src) {
      for (int64_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(gathered[src * kCount + i], static_cast<float>(src * 10000 + i));
      }
    }

    EXPECT_TRUE(comm.AllReduceSum(data.data(), 0).ok());
  });
  const absl::Time start = absl::Now();
  DestroyWorld(comms);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));  // finalize did not run into its timeout
}

// ---- Without a GPU: the rendezvous path touches no CUDA API on ranks > 0. ----

TEST(NcclRendezvousTest, RankTimesOutWhenRankZeroNeverPublishes) {
  InMemoryStore store;
  const absl::Time start = absl::Now();
  auto comm = CreateNcclCommunicator(&store, /*rank=*/1, /*world_size=*/2,
                                     Options(/*device=*/0, absl::Seconds(1)));
  const absl::Duration elapsed = absl::Now() - start;
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_NE(comm.status().message().find("gen1/nccl_id"), absl::string_view::npos) << comm.status();
  EXPECT_GE(elapsed, absl::Milliseconds(900));
  EXPECT_LT(elapsed, absl::Seconds(10));
}

TEST(NcclRendezvousTest, RejectsMalformedId) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("gen1/nccl_id", "short").ok());
  auto comm = CreateNcclCommunicator(&store, 1, 2, Options(0, absl::Seconds(1)));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDataLoss) << comm.status();
}

TEST(NcclRendezvousTest, RejectsBadArguments) {
  InMemoryStore store;
  EXPECT_EQ(CreateNcclCommunicator(nullptr, 0, 1, Options(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateNcclCommunicator(&store, 2, 2, Options(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateNcclCommunicator(&store, -1, 2, Options(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateNcclCommunicator(&store, 0, 1, Options(-1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateNcclCommunicator(&store, 0, 1, Options(0, absl::ZeroDuration())).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- On one GPU. ----

TEST(NcclCommunicatorTest, WorldOfOneCollectives) {
  SKIP_WITHOUT_GPUS(1);
  CheckCollectives(1);
}

TEST(NcclCommunicatorTest, InitTimesOutWhenAPeerNeverJoins) {
  SKIP_WITHOUT_GPUS(1);
  InMemoryStore store;
  const absl::Time start = absl::Now();
  auto comm = CreateNcclCommunicator(&store, 0, 2, Options(0, absl::Seconds(2)));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(NcclCommunicatorTest, AbortUnblocksAPendingCallAndFailsLaterOnes) {
  SKIP_WITHOUT_GPUS(1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  InMemoryStore store;
  auto created = CreateNcclCommunicator(&store, 0, 1, Options(0));
  ASSERT_TRUE(created.ok()) << created.status();
  auto* comm = static_cast<NcclCommunicator*>(created->get());
  DeviceBuffer data(16);

  // The all-reduce queues behind the gate, so it stays pending until Abort().
  StreamGate gate;
  ASSERT_EQ(cudaLaunchHostFunc(comm->stream(), &StreamGate::Wait, &gate), cudaSuccess);
  // Opens the gate late in any case, in case ncclCommAbort waits for the stream.
  std::thread opener([&] {
    absl::SleepFor(absl::Seconds(3));
    gate.open = true;
  });
  absl::Status pending;
  absl::Time returned;
  std::thread caller([&] {
    pending = comm->AllReduceSum(data.data(), 16);
    returned = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time aborted = absl::Now();
  comm->Abort();
  caller.join();
  opener.join();
  EXPECT_EQ(pending.code(), absl::StatusCode::kAborted) << pending;
  EXPECT_LT(returned - aborted, absl::Seconds(2));  // before the gate opened

  comm->Abort();  // idempotent
  EXPECT_EQ(comm->AllReduceSum(data.data(), 16).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(comm->AllGather(data.data(), 16, data.data()).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(cudaStreamSynchronize(comm->stream()), cudaSuccess);
}

TEST(NcclCommunicatorTest, WatchdogAbortsACallPastItsDeadline) {
  SKIP_WITHOUT_GPUS(1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  InMemoryStore store;
  auto created = CreateNcclCommunicator(&store, 0, 1, Options(0, absl::Seconds(1)));
  ASSERT_TRUE(created.ok()) << created.status();
  auto* comm = static_cast<NcclCommunicator*>(created->get());
  DeviceBuffer data(16);
  StreamGate gate;
  ASSERT_EQ(cudaLaunchHostFunc(comm->stream(), &StreamGate::Wait, &gate), cudaSuccess);
  std::thread opener([&] {
    absl::SleepFor(absl::Seconds(3));
    gate.open = true;
  });
  absl::Status status = comm->AllReduceSum(data.data(), 16);
  opener.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("rank 0"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("all-reduce"), absl::string_view::npos) << status;
  EXPECT_EQ(comm->AllReduceSum(data.data(), 16).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(cudaStreamSynchronize(comm->stream()), cudaSuccess);
}

// ---- On every GPU of the machine (ranks as threads). ----

TEST(NcclCommunicatorTest, WorldOfAllGpusCollectives) {
  SKIP_WITHOUT_GPUS(2);
  CheckCollectives(VisibleGpus());
}

TEST(NcclCommunicatorTest, AbortUnblocksACollectiveThePeersNeverJoin) {
  SKIP_WITHOUT_GPUS(2);
  const int n = VisibleGpus();
  InMemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms = CreateWorld(&store, n);
  for (const auto& c : comms) ASSERT_NE(c, nullptr);
  absl::Status pending;
  absl::Time returned;
  std::thread caller([&] {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    DeviceBuffer data(1024);
    pending = comms[0]->AllReduceSum(data.data(), 1024);  // ranks 1.. never call it
    returned = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time aborted = absl::Now();
  for (auto& c : comms) c->Abort();
  caller.join();
  EXPECT_EQ(pending.code(), absl::StatusCode::kAborted) << pending;
  EXPECT_LT(returned - aborted, absl::Seconds(5));
}

// Stream-ordered use (the backend's stream): collectives return once enqueued, run in order on
// that stream, and Synchronize() waits for them.
TEST(NcclCommunicatorTest, StreamOrderedCollectivesCompleteAtSynchronize) {
  SKIP_WITHOUT_GPUS(1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    InMemoryStore store;
    NcclOptions options = Options(0);
    options.stream = stream;
    auto comm = CreateNcclCommunicator(&store, 0, 1, options);
    ASSERT_TRUE(comm.ok()) << comm.status();
    constexpr int64_t kCount = 1 << 20;
    DeviceBuffer data(kCount);
    data.Upload(std::vector<float>(kCount, 3.0f));
    DeviceBuffer gathered(kCount);
    // Ordered on the stream: the gather sees the all-reduced values.
    ASSERT_TRUE((*comm)->AllReduceSum(data.data(), kCount).ok());
    ASSERT_TRUE((*comm)->AllGather(data.data(), kCount, gathered.data()).ok());
    ASSERT_TRUE((*comm)->Synchronize().ok());
    EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
    const std::vector<float> out = gathered.Download();
    EXPECT_EQ(out.front(), 3.0f);
    EXPECT_EQ(out.back(), 3.0f);
  }
  // The stream was borrowed: it outlives the communicator.
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// A stream-ordered collective whose peer never arrives does not block the caller; Synchronize
// is bounded by the timeout and aborts the communicator.
TEST(NcclCommunicatorTest, StreamOrderedSynchronizeTimesOutWhenAPeerIsMissing) {
  SKIP_WITHOUT_GPUS(2);
  InMemoryStore store;
  cudaStream_t streams[2] = {nullptr, nullptr};
  std::vector<std::unique_ptr<Communicator>> world(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      ASSERT_EQ(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking), cudaSuccess);
      NcclOptions options = Options(r, absl::Seconds(2));
      options.stream = streams[r];
      auto comm = CreateNcclCommunicator(&store, r, 2, options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      world[r] = std::move(*comm);
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_NE(world[0], nullptr);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceBuffer data(1024);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(world[0]->AllReduceSum(data.data(), 1024).ok());  // rank 1 never joins
  const absl::Status sync = world[0]->Synchronize();
  EXPECT_EQ(sync.code(), absl::StatusCode::kDeadlineExceeded) << sync;
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  world[1]->Abort();
  world.clear();
  for (cudaStream_t s : streams) cudaStreamDestroy(s);
}

}  // namespace
}  // namespace tpserve::comm
