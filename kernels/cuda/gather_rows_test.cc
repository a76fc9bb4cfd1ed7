#include "kernels/cuda/gather_rows.cuh"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/reference/embedding.h"
#include "kernels/cuda/cuda_test_util.h"

namespace tpserve::cuda {
namespace {

using testing::DeviceArray;
using testing::RandomFloats;

// A plain copy: the result must equal the reference (the embedding reference gathers f32 rows
// too) bit for bit.
void CheckGather(int64_t m, int64_t cols, const std::vector<int32_t>& rows) {
  const auto n_rows = static_cast<int64_t>(rows.size());
  const std::vector<float> x = RandomFloats(m * cols, 21 + cols);  // [m, cols]
  std::vector<float> ref(n_rows * cols);                           // [n_rows, cols]
  kernels::cpu::reference::GatherRows(x.data(), rows.data(), n_rows, cols, ref.data());

  DeviceArray<float> d_x(x);
  DeviceArray<int32_t> d_rows(rows);
  DeviceArray<float> d_out(n_rows * cols);
  ASSERT_EQ(LaunchGatherRows(d_x.data(), cols, d_rows.data(), n_rows, d_out.data(), nullptr),
            cudaSuccess);
  const std::vector<float> got = d_out.Download();
  for (int64_t i = 0; i < n_rows * cols; ++i) {
    ASSERT_EQ(got[i], ref[i]) << "m=" << m << " cols=" << cols << " at " << i;
  }
}

TEST(GatherRowsTest, MatchesReference) {
  TPSERVE_SKIP_WITHOUT_GPU();
  for (int64_t cols : {1, 576, 4097}) {
    CheckGather(1, cols, {0});
    CheckGather(7, cols, {6, 2, 2, 0});  // last rows of sequences, a repeat, out of order
    std::vector<int32_t> all(64);        // [64]: every row, reversed
    for (int32_t j = 0; j < 64; ++j) all[j] = 63 - j;
    CheckGather(64, cols, all);
  }
}

TEST(GatherRowsTest, EmptyIsNoop) {
  TPSERVE_SKIP_WITHOUT_GPU();
  EXPECT_EQ(LaunchGatherRows(nullptr, 4096, nullptr, 0, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(LaunchGatherRows(nullptr, 0, nullptr, 3, nullptr, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace tpserve::cuda
