#include "kernels/cpu/softmax.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "glog/logging.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {
namespace {

constexpr int64_t kParallelElements = 1 << 15;

float RowMax(const float* x, int64_t n) {
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 mx = neg_inf;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    const __m256 v =
        _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(x + i, mask), _mm256_castsi256_ps(mask));
    mx = _mm256_max_ps(mx, v);
  }
  return HorizontalMax(mx);
}

// Returns sum(exp(x - mx)) in a fixed order; if `e` is non-null also stores exp(x - mx) there.
float ExpSum(const float* x, float mx, float* e, int64_t n) {
  const __m256 m = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    if (e != nullptr) _mm256_storeu_ps(e + i, v);
    acc = _mm256_add_ps(acc, v);
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    __m256 v = Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), m));
    v = _mm256_and_ps(v, _mm256_castsi256_ps(mask));
    if (e != nullptr) _mm256_maskstore_ps(e + i, mask, v);
    acc = _mm256_add_ps(acc, v);
  }
  return HorizontalSum(acc);
}

// y[i] = y[i] * s + b.
void MulAdd(float* y, float s, float b, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  const __m256 bv = _mm256_set1_ps(b);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(y + i), sv, bv));
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    _mm256_maskstore_ps(y + i, mask, _mm256_fmadd_ps(_mm256_maskload_ps(y + i, mask), sv, bv));
  }
}

void ForRows(int64_t m, int64_t n, ThreadPool* pool,
             const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (pool == nullptr || m * n < kParallelElements) {
    fn(0, m);
  } else {
    pool->ParallelFor(m, fn);
  }
}

}  // namespace

void Softmax(const float* x, float* out, int64_t m, int64_t n, ThreadPool* pool) {
  CHECK_GT(n, 0);
  ForRows(m, n, pool, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float mx = RowMax(x + r * n, n);
      const float sum = ExpSum(x + r * n, mx, out + r * n, n);
      MulAdd(out + r * n, 1.0f / sum, 0.0f, n);
    }
  });
}

void LogSoftmax(const float* x, float* out, int64_t m, int64_t n, ThreadPool* pool) {
  CHECK_GT(n, 0);
  ForRows(m, n, pool, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float mx = RowMax(x + r * n, n);
      const float sum = ExpSum(x + r * n, mx, nullptr, n);
      // x - (mx + log(sum)), the offset formed in double and rounded once.
      const float offset =
          static_cast<float>(static_cast<double>(mx) + std::log(static_cast<double>(sum)));
      if (out != x) std::copy(x + r * n, x + (r + 1) * n, out + r * n);
      MulAdd(out + r * n, 1.0f, -offset, n);
    }
  });
}

}  // namespace tpserve::kernels::cpu
