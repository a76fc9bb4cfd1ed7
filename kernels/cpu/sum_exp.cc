#include "kernels/cpu/sum_exp.h"

#include <immintrin.h>

#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {
namespace {

// acc += the 8 lanes of e, widened to double (lanes 0-3 into acc[0], 4-7 into acc[1]).
inline void AddWide(__m256 e, __m256d* acc) {
  acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
  acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}

}  // namespace

double SumExp(const float* x, int64_t n, float scale, float offset) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 voffset = _mm256_set1_ps(offset);
  // Two independent double accumulator pairs hide the add latency; summed in a fixed order.
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    AddWide(Exp(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), vscale, voffset)), acc);
    AddWide(Exp(_mm256_fmsub_ps(_mm256_loadu_ps(x + i + 8), vscale, voffset)), acc + 2);
  }
  for (; i + 8 <= n; i += 8) {
    AddWide(Exp(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), vscale, voffset)), acc);
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    const __m256 e = Exp(_mm256_fmsub_ps(_mm256_maskload_ps(x + i, mask), vscale, voffset));
    AddWide(_mm256_and_ps(e, _mm256_castsi256_ps(mask)), acc + 2);
  }
  const __m256d sum = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
  const __m128d half = _mm_add_pd(_mm256_castpd256_pd128(sum), _mm256_extractf128_pd(sum, 1));
  return _mm_cvtsd_f64(_mm_add_sd(half, _mm_unpackhi_pd(half, half)));
}

}  // namespace tpserve::kernels::cpu
