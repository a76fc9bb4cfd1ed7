// File: kernels/cpu/quant/fixed_sum.h
//
// Exact, order-free sums of float partial sums: the arithmetic that makes a row-parallel
// product the same bits whatever the world. A row-parallel matmul splits k across ranks;
// summing each rank's float partial in some order rounds differently for every split.
// Instead, k is cut into granules every split respects (block_sums.h), each granule's float
// partial v (a chain from 0, the same float operations on every path) is rounded once to
// fixed point,
//   Fixed(v) = round-half-even(clamp(v) * 2^32) as int64,
// and the fixed values are added as integers, which is exact and associative: any split of k
// on granule boundaries, added in any order (an int64 all-reduce), gives the same sum, and
// FromFixed turns it into the same float.
//
// Range: v is clamped to [-2^18, 2^18] (NaN to -2^18) so that |v * 2^32| < 2^51, which the
// vector conversion below needs; a granule's partial that large means the model has
// overflowed anyway. The resolution, 2^-32, is far below a float's rounding at the magnitudes
// activations have (a float of 1 rounds at 2^-24), so the fixed sum is as close to the exact
// sum as a float chain. Int64 sums wrap rather than trap (still exact and order-free, modulo
// 2^64); a wrapped sum would need 2^13 granules at the clamp.
//
// Header-only; the vector helpers need AVX2 (the kernels' own .cc files).
#ifndef TPSERVE_KERNELS_CPU_QUANT_FIXED_SUM_H_
#define TPSERVE_KERNELS_CPU_QUANT_FIXED_SUM_H_

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tpserve::kernels::cpu {

inline constexpr float kFixedLimit = 0x1p18f;
inline constexpr double kFixedOne = 0x1p32;  // the fixed point's 1.0

// The definition (and the scalar reference of the vector form).
inline int64_t ToFixed(float v) {
  const float c = std::isnan(v) ? -kFixedLimit : std::clamp(v, -kFixedLimit, kFixedLimit);
  return static_cast<int64_t>(std::nearbyint(static_cast<double>(c) * kFixedOne));
}

inline float FromFixed(int64_t sum) {
  return static_cast<float>(static_cast<double>(sum) * (1.0 / kFixedOne));
}

// lo += Fixed(v[0..3]), hi += Fixed(v[4..7]), each lane in int64. The rounding: x + 1.5 * 2^52
// for |x| < 2^51 lands in [2^52, 2^53), where doubles are the integers, so the addition rounds
// x to an integer (to nearest, ties to even, as nearbyint), and its bits minus the bits of
// 1.5 * 2^52 are that integer. max_ps returns its second operand when the first is NaN.
[[gnu::always_inline]] inline void AddFixed8(__m256 v, __m256i* lo, __m256i* hi) {
  const __m256 limit = _mm256_set1_ps(kFixedLimit);
  const __m256 c =
      _mm256_min_ps(_mm256_max_ps(v, _mm256_sub_ps(_mm256_setzero_ps(), limit)), limit);
  const __m256d one = _mm256_set1_pd(kFixedOne);
  const __m256d magic = _mm256_set1_pd(0x1.8p52);
  const __m256i magic_bits = _mm256_castpd_si256(magic);
  const __m256d a = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(c)), one);
  const __m256d b = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(c, 1)), one);
  *lo = _mm256_add_epi64(
      *lo, _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(a, magic)), magic_bits));
  *hi = _mm256_add_epi64(
      *hi, _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(b, magic)), magic_bits));
}

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_FIXED_SUM_H_
