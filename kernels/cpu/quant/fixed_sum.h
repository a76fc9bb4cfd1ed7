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
// Range: v is clamped to [-2^18, 2^18] (NaN to -2^18), so |Fixed(v)| <= 2^50; a granule's
// partial that large means the model has overflowed anyway. The resolution, 2^-32, is far below
// a float's rounding at the magnitudes activations have (a float of 1 rounds at 2^-24), so the
// fixed sum is as close to the exact sum as a float chain. Int64 sums wrap rather than trap
// (still exact and order-free, modulo 2^64); a wrapped sum would need 2^13 granules at the
// clamp.
//
// The kernels' form. The tiles run each granule's chain on activation scales times 2^32, which
// scales every float operation of it exactly (a power of two, far from overflow), so the
// chain's value is s = v * 2^32 and Fixed(v) = round-half-even(clamp(s, +-2^50)), with no
// multiply. AVX2 has no float -> int64 conversion; there are two ways round it:
//   AddFixed8        through doubles (the magic-number rounding below), into int64 lanes at
//                    once: the fewest registers, for tiles of many accumulators;
//   AddFixedParts8   each rounded s in two int32 parts,
//                      a = round(c / 2^25)  (|a| <= 2^25),   b = c - a * 2^25  (exact: |b| <= 2^24)
//                      round-half-even(c) = a * 2^25 + round-half-even(b)   (a * 2^25 is even),
//                    the a's and b's of up to kFixedRun granules added in int32 lanes (exact:
//                    kFixedRun * 2^25 < 2^31), then WidenFixedParts8 to int64 as A * 2^25 + B:
//                    fewer operations, for converting a run of chains together.
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

inline constexpr float kFixedScaledLimit = 0x1p50f;  // kFixedLimit * kFixedOne
inline constexpr int kFixedRun = 32;                 // granules per int32 run (see above)

// lo += Fixed(s[0..3] / 2^32), hi += Fixed(s[4..7] / 2^32), each lane in int64, s a granule's
// chain in units of 2^-32 (above). The rounding: x + 1.5 * 2^52 for |x| <= 2^51 lands in
// [2^52, 2^53], where doubles are the integers, so the addition rounds x to an integer (to
// nearest, ties to even, as nearbyint), and its bits minus the bits of 1.5 * 2^52 are that
// integer. max_ps returns its second operand when the first is NaN.
[[gnu::always_inline]] inline void AddFixed8(__m256 s, __m256i* lo, __m256i* hi) {
  const __m256 limit = _mm256_set1_ps(kFixedScaledLimit);
  const __m256 c =
      _mm256_min_ps(_mm256_max_ps(s, _mm256_sub_ps(_mm256_setzero_ps(), limit)), limit);
  const __m256d magic = _mm256_set1_pd(0x1.8p52);
  const __m256i magic_bits = _mm256_castpd_si256(magic);
  const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(c));
  const __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(c, 1));
  *lo = _mm256_add_epi64(
      *lo, _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(a, magic)), magic_bits));
  *hi = _mm256_add_epi64(
      *hi, _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(b, magic)), magic_bits));
}

// a += the high parts, b += the low parts (int32 lanes, above) of Fixed(s[0..7] / 2^32).
[[gnu::always_inline]] inline void AddFixedParts8(__m256 s, __m256i* a, __m256i* b) {
  const __m256 limit = _mm256_set1_ps(kFixedScaledLimit);
  const __m256 c =
      _mm256_min_ps(_mm256_max_ps(s, _mm256_sub_ps(_mm256_setzero_ps(), limit)), limit);
  const __m256 high = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(0x1p-25f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 low = _mm256_fnmadd_ps(high, _mm256_set1_ps(0x1p25f), c);
  *a = _mm256_add_epi32(*a, _mm256_cvtps_epi32(high));  // exact: an integer below 2^26
  *b = _mm256_add_epi32(*b, _mm256_cvtps_epi32(low));   // rounds half to even (the default MXCSR)
}

// lo += the run's values 0..3, hi += 4..7, as int64: a * 2^25 + b.
[[gnu::always_inline]] inline void WidenFixedParts8(__m256i a, __m256i b, __m256i* lo,
                                                    __m256i* hi) {
  const auto widen = [](__m128i a4, __m128i b4) {
    return _mm256_add_epi64(_mm256_slli_epi64(_mm256_cvtepi32_epi64(a4), 25),
                            _mm256_cvtepi32_epi64(b4));
  };
  *lo = _mm256_add_epi64(*lo, widen(_mm256_castsi256_si128(a), _mm256_castsi256_si128(b)));
  *hi =
      _mm256_add_epi64(*hi, widen(_mm256_extracti128_si256(a, 1), _mm256_extracti128_si256(b, 1)));
}

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_FIXED_SUM_H_
