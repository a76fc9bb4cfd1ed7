#include "kernels/cuda/gemm.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/reference/matmul.h"
#include "kernels/cuda/cuda_test_util.h"

namespace tpserve::cuda {
namespace {

using testing::DeviceArray;
using testing::RandomFloats;
using testing::RoundToBf16;

const __nv_bfloat16* AsBf16(const DeviceArray<uint16_t>& a) {
  return reinterpret_cast<const __nv_bfloat16*>(a.data());
}

// Inputs are bf16 values in [-1, 1), so every product is exact in f32 and only the f32
// accumulation errs. Each partial sum is a random walk of size ~ sqrt(p) / 3; even if the tensor
// cores truncated every addition (error up to 1 ulp ~ 2u |s_p|, all one sign), the total stays
// below 2u * sum_p sqrt(p) / 3 ~ 2.7e-8 k^1.5. The tolerance 2^-10 sqrt(k) (relative to the
// output scale sqrt(k) max|x| max|w|) is ~9x that bound at k = 4097 and ~300x below the size of
// any indexing or layout error (|y| ~ sqrt(k) / 3).
double Tolerance(int64_t k) { return std::sqrt(static_cast<double>(k)) / 1024.0; }

class GemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::VisibleGpus() == 0) return;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    auto gemm = Gemm::Create(stream_);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    gemm_ = std::move(*gemm);
  }
  void TearDown() override {
    gemm_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Runs y = x · wᵀ for random bf16 x: [m, k], w: [n, k] and compares with the float64
  // reference; returns y.
  std::vector<float> CheckShape(int64_t m, int64_t n, int64_t k) {
    std::vector<float> x = RandomFloats(m * k, 51 + k);  // [m, k]
    std::vector<float> w = RandomFloats(n * k, 52 + n);  // [n, k]
    const std::vector<uint16_t> x_bits = RoundToBf16(&x);
    const std::vector<uint16_t> w_bits = RoundToBf16(&w);
    std::vector<float> ref(m * n);  // [m, n]
    kernels::cpu::reference::Matmul(x.data(), w.data(), ref.data(), m, n, k);

    DeviceArray<uint16_t> d_x(x_bits);
    DeviceArray<uint16_t> d_w(w_bits);
    DeviceArray<float> d_y(m * n);
    const absl::Status s = gemm_->Run(AsBf16(d_x), AsBf16(d_w), d_y.data(), m, n, k);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> got = d_y.Download();
    const double tol = Tolerance(k);
    for (int64_t i = 0; i < m * n; ++i) {
      if (std::fabs(got[i] - ref[i]) > tol) {
        ADD_FAILURE() << "m=" << m << " n=" << n << " k=" << k << " y[" << i / n << ", " << i % n
                      << "] = " << got[i] << ", reference " << ref[i] << ", tolerance " << tol;
        break;
      }
    }
    return got;
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
};

TEST_F(GemmTest, MatchesReference) {
  TPSERVE_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {
      {1, 1, 1},       {3, 5, 7},      {1, 4097, 576},  {7, 576, 4097}, {64, 1000, 576},
      {64, 576, 4097}, {64, 4096, 64}, {1, 14336, 512}, {7, 1, 4096},   {64, 64, 1},
  };
  for (const Shape& s : shapes) CheckShape(s.m, s.n, s.k);
}

// Same inputs, same handle and stream: the same bits.
TEST_F(GemmTest, Deterministic) {
  TPSERVE_SKIP_WITHOUT_GPU();
  const std::vector<float> a = CheckShape(64, 576, 4097);
  const std::vector<float> b = CheckShape(64, 576, 4097);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST_F(GemmTest, EmptySumIsZero) {
  TPSERVE_SKIP_WITHOUT_GPU();
  DeviceArray<uint16_t> d_x(0);
  DeviceArray<uint16_t> d_w(0);
  DeviceArray<float> d_y(std::vector<float>(7 * 5, 1.0f));  // [7, 5], overwritten
  ASSERT_TRUE(gemm_->Run(AsBf16(d_x), AsBf16(d_w), d_y.data(), 7, 5, 0).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(d_y.Download(), std::vector<float>(7 * 5, 0.0f));
}

TEST_F(GemmTest, EmptyOutputIsNoopAndBadSizesAreRejected) {
  TPSERVE_SKIP_WITHOUT_GPU();
  EXPECT_TRUE(gemm_->Run(nullptr, nullptr, nullptr, 0, 4096, 4096).ok());
  EXPECT_TRUE(gemm_->Run(nullptr, nullptr, nullptr, 4096, 0, 4096).ok());
  EXPECT_EQ(gemm_->Run(nullptr, nullptr, nullptr, -1, 4, 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gemm_->Run(nullptr, nullptr, nullptr, 4, int64_t{1} << 31, 4).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve::cuda
