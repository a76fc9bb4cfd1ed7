#include "kernels/cuda/device_info.h"

#include <gtest/gtest.h>

namespace tpserve::cuda {
namespace {

TEST(DeviceInfoTest, LinkedLibrariesReportTheirVersions) {
  auto v = QueryLibraryVersions();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_GE(v->cuda_runtime, 12000);
  EXPECT_GE(v->cublas, 120000);
  EXPECT_GE(v->nccl, 21800);  // ncclCommInitRankConfig and non-blocking comms need >= 2.14
}

TEST(DeviceInfoTest, ListsGpusOrSkips) {
  auto gpus = ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  if (gpus->empty()) GTEST_SKIP() << "no GPU visible to the CUDA driver on this machine";
  for (const GpuInfo& g : *gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_GE(g.sm_major, 7);
    EXPECT_GT(g.total_memory_bytes, 0u);
  }
}

}  // namespace
}  // namespace tpserve::cuda
