// HostStagingCommunicator: two GPU ranks sharing one GPU (which NCCL refuses) reduce, gather
// and broadcast device buffers through Gloo on loopback.
#include "server/comm/staging/host_staging_communicator.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/store.h"

namespace tpserve::comm {
namespace {

using cuda::testing::DeviceArray;

TEST(HostStagingCommunicatorTest, TwoRanksOnOneGpuReduceAndGather) {
  TPSERVE_SKIP_WITHOUT_GPU();
  constexpr int kWorld = 2;
  constexpr int64_t kCount = 4099;
  InMemoryStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&store, r] {
      ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
      cudaStream_t stream = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      GlooOptions options;
      options.prefix = "staging/";
      auto gloo = CreateGlooCommunicator(&store, r, kWorld, options);
      ASSERT_TRUE(gloo.ok()) << gloo.status();
      auto staged = std::make_unique<HostStagingCommunicator>(*std::move(gloo), stream);
      HostStagingCommunicator& comm = *staged;

      std::vector<float> host(kCount);
      for (int64_t i = 0; i < kCount; ++i) host[i] = static_cast<float>((r + 1) * (i % 5));
      DeviceArray<float> data(host);
      ASSERT_TRUE(comm.AllReduceSum(data.data(), kCount).ok());
      ASSERT_TRUE(comm.Synchronize().ok());
      const std::vector<float> sum = data.Download();
      for (int64_t i = 0; i < kCount; ++i) ASSERT_EQ(sum[i], 3.0f * (i % 5)) << i;

      DeviceArray<float> gathered(kWorld * kCount);
      ASSERT_TRUE(comm.AllGather(data.data(), kCount, gathered.data()).ok());
      ASSERT_TRUE(comm.Synchronize().ok());
      const std::vector<float> all = gathered.Download();
      for (int64_t i = 0; i < kWorld * kCount; ++i) ASSERT_EQ(all[i], 3.0f * (i % kCount % 5));

      DeviceArray<float> to_root(kWorld * kCount);
      ASSERT_TRUE(comm.Gather(data.data(), kCount, to_root.data()).ok());
      ASSERT_TRUE(comm.Synchronize().ok());
      if (r == 0) EXPECT_EQ(to_root.Download(), all);
      staged.reset();  // syncs the borrowed stream: before the stream goes
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace tpserve::comm
