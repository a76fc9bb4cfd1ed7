// File: kernels/cpu/vec_math.h
//
// AVX2/FMA building blocks shared by the CPU kernels: a vectorised expf, a fixed-order
// horizontal sum, and masks for the tail of a row. Header-only (inline), stateless, thread-safe.
// Every kernel that needs a horizontal sum uses HorizontalSum so that the reduction order of
// one output element never depends on which code path (tile size, tail) computed it.
#ifndef TPSERVE_KERNELS_CPU_VEC_MATH_H_
#define TPSERVE_KERNELS_CPU_VEC_MATH_H_

#include <immintrin.h>

#include <cstdint>

namespace tpserve::kernels::cpu {

// Lane mask with the first `count` (0..8) lanes set, for _mm256_maskload_ps/_mm256_maskstore_ps.
inline __m256i TailMask(int64_t count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lanes);
}

// Sum of the 8 lanes in a fixed order: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x per lane, <= 2 ulp against the correctly rounded result over the normal range (checked
// in vec_math_test.cc). Cephes-style: x = n*ln2 + r with |r| <= ln2/2, a degree-6 polynomial
// for e^r, then the scaling by 2^n done in two halves so n in [-150, 128] needs no special
// case: results below the normal range become denormals or +0, above ~88.72 become +inf, NaN
// stays NaN.
inline __m256 Exp(__m256 x) {
  // min/max return their second operand when either is NaN, so NaN passes through the clamp.
  x = _mm256_max_ps(_mm256_set1_ps(-104.0f), _mm256_min_ps(_mm256_set1_ps(89.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  __m256 y = _mm256_fmadd_ps(p, r2, r);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  // 2^n = 2^n1 * 2^n2 with n1 = n >> 1, n2 = n - n1, each a normal float for n in [-150, 128].
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}

// Scalar e^x with exactly the lane arithmetic of Exp (for tails and scalar call sites).
inline float ExpScalar(float x) { return _mm256_cvtss_f32(Exp(_mm256_set1_ps(x))); }

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_VEC_MATH_H_
