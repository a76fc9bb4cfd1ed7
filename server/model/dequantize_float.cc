// F32, F16 and BF16 "blocks" (one value each) to f32.
#include <immintrin.h>

#include <cstring>

#include "server/model/dequantize_kernels.h"

namespace tpserve::model::kernels {

void DequantizeF32(const uint8_t* src, int64_t n_blocks, float* dst) {
  std::memcpy(dst, src, static_cast<size_t>(n_blocks) * sizeof(float));
}

// F16C converts 8 halves per instruction and is exact except that it quiets signalling
// NaNs; a group holding any NaN is redone with the exact scalar conversion.
void DequantizeF16(const uint8_t* src, int64_t n_blocks, float* dst) {
  int64_t i = 0;
  const __m128i abs_mask = _mm_set1_epi16(0x7FFF);
  const __m128i inf = _mm_set1_epi16(0x7C00);
  for (; i + 8 <= n_blocks; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, abs_mask), inf);
    if (_mm_movemask_epi8(nan) == 0) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    } else {
      for (int64_t j = i; j < i + 8; ++j) dst[j] = LoadF16(src + 2 * j);
    }
  }
  for (; i < n_blocks; ++i) dst[i] = LoadF16(src + 2 * i);
}

void DequantizeBF16(const uint8_t* src, int64_t n_blocks, float* dst) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof(h));
    dst[i] = Bf16ToF32(h);
  }
}

}  // namespace tpserve::model::kernels
