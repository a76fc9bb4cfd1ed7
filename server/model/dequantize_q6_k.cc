// Q6_K to f32. block_q6_K (210 bytes, 256 values): uint8 ql[128] (low 4 bits); uint8 qh[64]
// (high 2 bits); int8 scales[16] (one per 16 values); f16 d.
// Each half h (128 values) uses ql[64h .. 64h+64), qh[32h .. 32h+32), scales[8h .. 8h+8).
// For l < 32 the four values l, l+32, l+64, l+96 of the half are
//   (ql[l] & 0xF | qh[l] bits 0-1 << 4), (ql[l+32] & 0xF | bits 2-3 << 4),
//   (ql[l] >> 4 | bits 4-5 << 4),        (ql[l+32] >> 4 | bits 6-7 << 4),
// each minus 32, times d * scales[value_index_in_half / 16].
#include "server/model/dequantize_kernels.h"

namespace tpserve::model::kernels {

void DequantizeQ6_K(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 210;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = LoadF16(src + 208);
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, scales += 8, dst += 128) {
      float ds[8];  // d * scale for each run of 16 values of this half
      for (int s = 0; s < 8; ++s) ds[s] = d * static_cast<float>(scales[s]);
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = ds[is + 0] * static_cast<float>(q1);
        dst[l + 32] = ds[is + 2] * static_cast<float>(q2);
        dst[l + 64] = ds[is + 4] * static_cast<float>(q3);
        dst[l + 96] = ds[is + 6] * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace tpserve::model::kernels
