#include "kernels/cuda/embedding.cuh"

#include <cuda_bf16.h>
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
using testing::RoundToBf16;

const __nv_bfloat16* AsBf16(const uint16_t* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }

// bf16 -> f32 is exact, so the gathered rows must equal the reference bit for bit.
void CheckGather(int64_t vocab, int64_t d, int64_t m) {
  std::vector<float> table = RandomFloats(vocab * d, 11 + d);  // [vocab, d]
  const std::vector<uint16_t> table_bits = RoundToBf16(&table);
  std::vector<int32_t> ids(m);  // [m], repeats included
  for (int64_t i = 0; i < m; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 3) % vocab);
  ids[0] = static_cast<int32_t>(vocab - 1);
  std::vector<float> ref(m * d);  // [m, d]
  kernels::cpu::reference::GatherRows(table.data(), ids.data(), m, d, ref.data());

  DeviceArray<uint16_t> d_table(table_bits);
  DeviceArray<int32_t> d_ids(ids);
  DeviceArray<float> d_out(m * d);
  ASSERT_EQ(
      LaunchEmbeddingGather(AsBf16(d_table.data()), d_ids.data(), m, d, d_out.data(), nullptr),
      cudaSuccess);
  const std::vector<float> got = d_out.Download();
  for (int64_t i = 0; i < m * d; ++i) {
    ASSERT_EQ(got[i], ref[i]) << "vocab=" << vocab << " d=" << d << " m=" << m << " at " << i;
  }
}

TEST(EmbeddingTest, MatchesReference) {
  TPSERVE_SKIP_WITHOUT_GPU();
  for (int64_t d : {1, 576, 4096, 4097}) {
    for (int64_t m : {1, 7, 64}) CheckGather(/*vocab=*/100, d, m);
  }
}

TEST(EmbeddingTest, EmptyIsNoop) {
  TPSERVE_SKIP_WITHOUT_GPU();
  EXPECT_EQ(LaunchEmbeddingGather(nullptr, nullptr, 0, 4096, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(LaunchEmbeddingGather(nullptr, nullptr, 3, 0, nullptr, nullptr), cudaSuccess);
}

// A table past 2^31 elements (Llama 3's is 128256 x 4096 = 525M; here 524,298 x 4096 bf16 =
// 4.3 GB): the last row's offset needs 64-bit arithmetic.
TEST(EmbeddingTest, RowOffsetsPast2To31Elements) {
  TPSERVE_SKIP_WITHOUT_GPU();
  constexpr int64_t kD = 4096;
  constexpr int64_t kVocab = (int64_t{1} << 31) / kD + 10;
  const size_t bytes = static_cast<size_t>(kVocab * kD) * sizeof(uint16_t);
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (free_bytes < bytes + (size_t{1} << 30)) GTEST_SKIP() << "needs " << bytes << " B free";

  DeviceArray<uint16_t> d_table(static_cast<size_t>(kVocab * kD));  // [kVocab, kD]
  ASSERT_EQ(cudaMemset(d_table.data(), 0, bytes), cudaSuccess);
  std::vector<float> row = RandomFloats(kD, 5);  // [kD], uploaded as row kVocab - 1
  const std::vector<uint16_t> row_bits = RoundToBf16(&row);
  ASSERT_EQ(cudaMemcpy(d_table.data() + (kVocab - 1) * kD, row_bits.data(), kD * sizeof(uint16_t),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  // ids: [2]; row 0 is all zeros.
  DeviceArray<int32_t> d_ids(std::vector<int32_t>{static_cast<int32_t>(kVocab - 1), 0});
  DeviceArray<float> d_out(2 * kD);  // [2, kD]
  ASSERT_EQ(
      LaunchEmbeddingGather(AsBf16(d_table.data()), d_ids.data(), 2, kD, d_out.data(), nullptr),
      cudaSuccess);
  const std::vector<float> got = d_out.Download();
  for (int64_t e = 0; e < kD; ++e) {
    ASSERT_EQ(got[e], row[e]) << e;
    ASSERT_EQ(got[kD + e], 0.0f) << e;
  }
}

}  // namespace
}  // namespace tpserve::cuda
