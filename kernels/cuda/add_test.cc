#include "kernels/cuda/add.cuh"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/reference/add.h"
#include "kernels/cuda/cuda_test_util.h"

namespace tpserve::cuda {
namespace {

using testing::DeviceArray;
using testing::RandomFloats;

// One correctly rounded f32 addition per element on both sides: bit-identical results.
TEST(AddTest, MatchesReferenceExactly) {
  TPSERVE_SKIP_WITHOUT_GPU();
  // The last size needs the grid-stride loop (more than 2^16 blocks of 256).
  for (int64_t n : {int64_t{1}, int64_t{576}, int64_t{4097}, (int64_t{1} << 24) + 3}) {
    std::vector<float> y = RandomFloats(n, 1);        // [n]
    const std::vector<float> x = RandomFloats(n, 2);  // [n]
    DeviceArray<float> d_y(y);
    DeviceArray<float> d_x(x);
    ASSERT_EQ(LaunchAdd(d_y.data(), d_x.data(), n, nullptr), cudaSuccess);
    kernels::cpu::reference::Add(y.data(), x.data(), n);
    const std::vector<float> got = d_y.Download();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], y[i]) << "n=" << n << " at " << i;
  }
}

TEST(AddTest, EmptyIsNoop) {
  TPSERVE_SKIP_WITHOUT_GPU();
  EXPECT_EQ(LaunchAdd(nullptr, nullptr, 0, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace tpserve::cuda
