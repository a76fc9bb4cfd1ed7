#include "kernels/cpu/add.h"

#include <immintrin.h>

#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {

void Add(float* y, const float* x, int64_t n) { AddTo(y, x, y, n); }

void AddTo(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    _mm256_maskstore_ps(
        out + i, mask,
        _mm256_add_ps(_mm256_maskload_ps(a + i, mask), _mm256_maskload_ps(b + i, mask)));
  }
}

void SumInOrder(const float* const* parts, int num_parts, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 acc = _mm256_loadu_ps(parts[0] + i);
    for (int p = 1; p < num_parts; ++p) acc = _mm256_add_ps(acc, _mm256_loadu_ps(parts[p] + i));
    _mm256_storeu_ps(out + i, acc);
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    __m256 acc = _mm256_maskload_ps(parts[0] + i, mask);
    for (int p = 1; p < num_parts; ++p) {
      acc = _mm256_add_ps(acc, _mm256_maskload_ps(parts[p] + i, mask));
    }
    _mm256_maskstore_ps(out + i, mask, acc);
  }
}

void Scale(float* y, float s, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), sv));
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    _mm256_maskstore_ps(y + i, mask, _mm256_mul_ps(_mm256_maskload_ps(y + i, mask), sv));
  }
}

}  // namespace tpserve::kernels::cpu
