#include "kernels/cpu/quant/q8_activations.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {

void QuantizeRowsQ8(const float* x, int64_t m, int64_t k, Q8Block* out) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const int64_t blocks = m * (k / 32);
  for (int64_t b = 0; b < blocks; ++b, x += 32) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int l = 0; l < 4; ++l) {
      v[l] = _mm256_loadu_ps(x + 8 * l);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[l]));
    }
    const float max_abs = HorizontalMax(amax);
    const float d = max_abs / 127.0f;
    const float id = max_abs > 0.0f ? 127.0f / max_abs : 0.0f;
    const __m256 scale = _mm256_set1_ps(id);
    __m256i q32[4];
    __m256i sum = _mm256_setzero_si256();
    for (int l = 0; l < 4; ++l) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[l], scale),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q32[l] = _mm256_cvtps_epi32(r);
      sum = _mm256_add_epi32(sum, q32[l]);
    }
    // int32 -> int8, in order: packs interleave 128-bit lanes, the permute restores it.
    const __m256i p01 = _mm256_packs_epi32(q32[0], q32[1]);
    const __m256i p23 = _mm256_packs_epi32(q32[2], q32[3]);
    const __m256i p = _mm256_packs_epi16(p01, p23);
    const __m256i ordered =
        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    Q8Block& blk = out[b];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk.q), ordered);
    const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    const int32_t total = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
    blk.d = d;
    blk.ds = d * static_cast<float>(total);
  }
}

void SumQuants(const Q8Block* blocks, int64_t count, int32_t* sums) {
  for (int64_t b = 0; b < count; ++b) {
    int32_t sum = 0;
    for (int l = 0; l < 32; ++l) sum += blocks[b].q[l];
    sums[b] = sum;
  }
}

void InterleaveRows8(const Q8Block* rows, int64_t kb, Q8Block8* out) {
  for (int64_t b = 0; b < kb; ++b) {
    Q8Block8& o = out[b];
    for (int r = 0; r < 8; ++r) {
      const Q8Block& in = rows[r * kb + b];
      o.d[r] = in.d;
      o.ds[r] = in.ds;
      int32_t sum = 0;
      for (int l = 0; l < 32; ++l) sum += in.q[l];
      o.qsum[r] = sum;
      for (int g = 0; g < 8; ++g) std::memcpy(o.q + 32 * g + 4 * r, in.q + 4 * g, 4);
    }
  }
}

}  // namespace tpserve::kernels::cpu
