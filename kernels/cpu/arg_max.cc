#include "kernels/cpu/arg_max.h"

#include <immintrin.h>

#include <cmath>
#include <limits>

#include "glog/logging.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {
namespace {

// The largest non-NaN value of x [n] (-inf when there is none). _mm256_max_ps(a, b) gives b
// when a is NaN, so x goes first and a NaN never replaces the running maximum.
float MaxIgnoringNan(const float* x, int64_t n) {
  const __m256 lowest = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = lowest, m1 = lowest;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    const __m256 tail =
        _mm256_blendv_ps(lowest, _mm256_maskload_ps(x + i, mask), _mm256_castsi256_ps(mask));
    m1 = _mm256_max_ps(tail, m1);
  }
  __m256 m = _mm256_max_ps(m0, m1);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

}  // namespace

int64_t ArgMax(const float* x, int64_t n) {
  CHECK_GE(n, 1);
  if (std::isnan(x[0])) return 0;
  const float best = MaxIgnoringNan(x, n);
  const __m256 vbest = _mm256_set1_ps(best);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vbest, _CMP_EQ_OQ));
    if (hits != 0) return i + __builtin_ctz(static_cast<unsigned>(hits));
  }
  for (; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;  // unreachable: x[0] is a number, so `best` is one of x's values
}

}  // namespace tpserve::kernels::cpu
