#include "kernels/cpu/rmsnorm.h"

#include <immintrin.h>

#include <cmath>
#include <functional>

#include "glog/logging.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {
namespace {

// Rows below this many elements in total run on the calling thread (a pool call costs ~1 µs).
constexpr int64_t kParallelElements = 1 << 16;

// 1 / sqrt(mean(row²) + eps) for row: [d], in a fixed order.
float InvRms(const float* row, int64_t d, float eps) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    const __m256 a = _mm256_loadu_ps(row + i);
    const __m256 b = _mm256_loadu_ps(row + i + 8);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
    acc1 = _mm256_fmadd_ps(b, b, acc1);
  }
  for (; i < d; i += 8) {
    const __m256 a = _mm256_maskload_ps(row + i, TailMask(d - i));
    acc0 = _mm256_fmadd_ps(a, a, acc0);
  }
  const float mean = HorizontalSum(_mm256_add_ps(acc0, acc1)) / static_cast<float>(d);
  return 1.0f / std::sqrt(mean + eps);
}

// out[i] = (row[i] * inv) * weight[i], row/out/weight: [d].
void ScaleRow(const float* row, const float* weight, float inv, float* out, int64_t d) {
  const __m256 s = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + i), s);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, _mm256_loadu_ps(weight + i)));
  }
  if (i < d) {
    const __m256i mask = TailMask(d - i);
    const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(row + i, mask), s);
    _mm256_maskstore_ps(out + i, mask, _mm256_mul_ps(v, _mm256_maskload_ps(weight + i, mask)));
  }
}

void ForRows(int64_t m, int64_t d, ThreadPool* pool,
             const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (pool == nullptr || m * d < kParallelElements) {
    fn(0, m);
  } else {
    pool->ParallelFor(m, fn);
  }
}

}  // namespace

void RmsNorm(const float* x, const float* weight, float eps, float* out, int64_t m, int64_t d,
             ThreadPool* pool) {
  CHECK_GT(d, 0);
  ForRows(m, d, pool, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      ScaleRow(x + r * d, weight, InvRms(x + r * d, d, eps), out + r * d, d);
    }
  });
}

void RmsNormHeads(float* x, int64_t row_stride, int64_t heads, int64_t head_dim,
                  const float* weight, float eps, int64_t m, ThreadPool* pool) {
  CHECK_GT(head_dim, 0);
  CHECK_GE(row_stride, heads * head_dim);
  ForRows(m, heads * head_dim, pool, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        float* head = x + r * row_stride + h * head_dim;  // [head_dim]
        ScaleRow(head, weight, InvRms(head, head_dim, eps), head, head_dim);
      }
    }
  });
}

void AddRmsNorm(float* residual, const float* x, const float* weight, float eps, float* out,
                int64_t m, int64_t d, ThreadPool* pool) {
  CHECK_GT(d, 0);
  ForRows(m, d, pool, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* res = residual + r * d;  // [d]
      const float* in = x + r * d;    // [d]
      int64_t i = 0;
      for (; i + 8 <= d; i += 8) {
        _mm256_storeu_ps(res + i, _mm256_add_ps(_mm256_loadu_ps(res + i), _mm256_loadu_ps(in + i)));
      }
      if (i < d) {
        const __m256i mask = TailMask(d - i);
        _mm256_maskstore_ps(
            res + i, mask,
            _mm256_add_ps(_mm256_maskload_ps(res + i, mask), _mm256_maskload_ps(in + i, mask)));
      }
      ScaleRow(res, weight, InvRms(res, d, eps), out + r * d, d);
    }
  });
}

}  // namespace tpserve::kernels::cpu
