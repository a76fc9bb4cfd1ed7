#include "kernels/cpu/matmul.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/matmul.h"
#include "kernels/cpu/test_util.h"

namespace tpserve::kernels::cpu {
namespace {

using testing::BitEqual;
using testing::kUnitRoundoff;
using testing::RandomVector;

// Forward error bound of one output: each lane of the 8-lane FMA chain adds ceil(k/8) terms, the
// horizontal sum 3 more additions, plus the final rounding: |err| <= (ceil(k/8) + 4) * u *
// sum_p |x_p * w_p| (Higham, recursive summation with FMA). The reference is float64, exact to
// well below that.
double Bound(const float* x, const float* w, int64_t k) {
  double abs_dot = 0.0;
  for (int64_t p = 0; p < k; ++p) abs_dot += std::fabs(static_cast<double>(x[p]) * w[p]);
  return (std::ceil(static_cast<double>(k) / 8.0) + 4.0) * kUnitRoundoff * abs_dot + 1e-30;
}

void CheckAgainstReference(int64_t m, int64_t n, int64_t k, ThreadPool* pool) {
  const std::vector<float> x = RandomVector(m * k, 1 + m, -1, 1);  // [m, k]
  const std::vector<float> w = RandomVector(n * k, 2 + n, -1, 1);  // [n, k]
  std::vector<float> y(m * n), ref(m * n);                         // [m, n]
  MatmulF32(x.data(), w.data(), y.data(), m, n, k, pool);
  reference::Matmul(x.data(), w.data(), ref.data(), m, n, k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_NEAR(y[i * n + j], ref[i * n + j], Bound(&x[i * k], &w[j * k], k))
          << "m=" << m << " n=" << n << " k=" << k << " at (" << i << ", " << j << ")";
    }
  }
}

TEST(MatmulTest, MatchesReferenceOverOddSizes) {
  ThreadPool pool(2);
  for (int64_t m : {1, 2, 3, 4, 5, 17}) {
    for (int64_t n : {1, 3, 17, 63, 577}) {
      for (int64_t k : {1, 3, 8, 17, 63, 577}) CheckAgainstReference(m, n, k, &pool);
    }
  }
}

TEST(MatmulTest, MatchesReferenceRealisticShapes) {
  ThreadPool pool(2);
  CheckAgainstReference(7, 576, 576, &pool);    // wo / wq
  CheckAgainstReference(5, 1536, 576, &pool);   // w_up
  CheckAgainstReference(9, 576, 1536, &pool);   // w_down
  CheckAgainstReference(1, 960, 576, nullptr);  // fused QKV, no pool
}

// Row r of an M-row call is bit-identical to the M=1 call on that row, for M across every
// tiling remainder and for tails in n and k.
TEST(MatmulTest, BatchInvariant) {
  ThreadPool pool(2);
  for (int64_t k : {17, 576, 1536}) {
    for (int64_t n : {63, 576}) {
      const int64_t max_m = 37;
      const std::vector<float> x = RandomVector(max_m * k, 21);  // [max_m, k]
      const std::vector<float> w = RandomVector(n * k, 22);      // [n, k]
      std::vector<float> single(max_m * n);                      // [max_m, n], row by row
      for (int64_t r = 0; r < max_m; ++r) {
        MatmulF32(&x[r * k], w.data(), &single[r * n], 1, n, k, &pool);
      }
      for (int64_t m : {2, 3, 4, 5, 6, 7, 8, 9, 31, 37}) {
        std::vector<float> batch(m * n);  // [m, n]
        MatmulF32(x.data(), w.data(), batch.data(), m, n, k, &pool);
        for (int64_t r = 0; r < m; ++r) {
          ASSERT_TRUE(BitEqual(&batch[r * n], &single[r * n], n))
              << "row " << r << " of m=" << m << " n=" << n << " k=" << k;
        }
      }
    }
  }
}

// Large m with a large k crosses the L2 column blocking; still bit-identical to m=1.
TEST(MatmulTest, BatchInvariantLargeM) {
  const int64_t m = 130, n = 1536, k = 576;
  const std::vector<float> x = RandomVector(m * k, 31);  // [m, k]
  const std::vector<float> w = RandomVector(n * k, 32);  // [n, k]
  std::vector<float> batch(m * n), one(n);
  ThreadPool pool(2);
  MatmulF32(x.data(), w.data(), batch.data(), m, n, k, &pool);
  for (int64_t r : {0, 1, 63, 127, 128, 129}) {
    MatmulF32(&x[r * k], w.data(), one.data(), 1, n, k, nullptr);
    ASSERT_TRUE(BitEqual(&batch[r * n], one.data(), n)) << "row " << r;
  }
}

TEST(MatmulTest, ThreadCountInvariant) {
  const int64_t m = 11, n = 1000, k = 333;
  const std::vector<float> x = RandomVector(m * k, 41);  // [m, k]
  const std::vector<float> w = RandomVector(n * k, 42);  // [n, k]
  std::vector<float> y1(m * n);
  MatmulF32(x.data(), w.data(), y1.data(), m, n, k, nullptr);
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    std::vector<float> y(m * n);
    MatmulF32(x.data(), w.data(), y.data(), m, n, k, &pool);
    EXPECT_TRUE(BitEqual(y.data(), y1.data(), m * n)) << threads << " threads";
  }
}

TEST(MatmulTest, EmptyShapesAreNoOps) {
  std::vector<float> y(4, 7.0f);
  const std::vector<float> x(4, 1.0f);
  MatmulF32(x.data(), x.data(), y.data(), 0, 4, 1, nullptr);
  MatmulF32(x.data(), x.data(), y.data(), 1, 0, 1, nullptr);
  EXPECT_EQ(y[0], 7.0f);
  MatmulF32(x.data(), x.data(), y.data(), 1, 4, 0, nullptr);  // k = 0: y = 0
  EXPECT_EQ(y[0], 0.0f);
}

}  // namespace
}  // namespace tpserve::kernels::cpu
