// Q5_K to f32. block_q5_K (176 bytes, 256 values): f16 d; f16 dmin; uint8 scales[12] (as
// Q4_K); uint8 qh[32] (fifth bits); uint8 qs[128] (low nibbles).
// Chunk c (64 values) uses qs[32c .. 32c+32) and bits 2c (first 32) and 2c+1 (second 32) of
// qh[0..32): value = d * sc * (nibble | bit << 4) - dmin * m.
#include "server/model/dequantize_kernels.h"

namespace tpserve::model::kernels {

void DequantizeQ5_K(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 176;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes) {
    const float d = LoadF16(src);
    const float dmin = LoadF16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* ql = src + 48;
    for (int chunk = 0; chunk < 4; ++chunk, ql += 32, dst += 64) {
      uint8_t sc, m;
      ScaleMinK4(2 * chunk, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(2 * chunk + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const int shift_lo = 2 * chunk, shift_hi = 2 * chunk + 1;
      for (int l = 0; l < 32; ++l) {
        const int lo = (ql[l] & 0xF) | (((qh[l] >> shift_lo) & 1) << 4);
        const int hi = (ql[l] >> 4) | (((qh[l] >> shift_hi) & 1) << 4);
        dst[l] = d1 * static_cast<float>(lo) - m1;
        dst[l + 32] = d2 * static_cast<float>(hi) - m2;
      }
    }
  }
}

}  // namespace tpserve::model::kernels
