// Q4_K to f32. block_q4_K (144 bytes, 256 values): f16 d; f16 dmin; uint8 scales[12] (eight
// 6-bit scale/min pairs, see ScaleMinK4); uint8 qs[128].
// The 256 values are 4 chunks of 64 backed by 32 bytes of qs each: value l of the chunk's
// first 32 is d * sc[2c] * (qs[l] & 0xF) - dmin * m[2c], of its second 32
// d * sc[2c+1] * (qs[l] >> 4) - dmin * m[2c+1].
#include "server/model/dequantize_kernels.h"

namespace tpserve::model::kernels {

void DequantizeQ4_K(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 144;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes) {
    const float d = LoadF16(src);
    const float dmin = LoadF16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    for (int chunk = 0; chunk < 4; ++chunk, q += 32, dst += 64) {
      uint8_t sc, m;
      ScaleMinK4(2 * chunk, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(2 * chunk + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) {
        dst[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
        dst[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
      }
    }
  }
}

}  // namespace tpserve::model::kernels
