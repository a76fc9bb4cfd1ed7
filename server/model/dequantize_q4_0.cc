// Q4_0 to f32. block_q4_0 (18 bytes, 32 values): f16 d; uint8 qs[16].
// Value j = ((qs[j] & 0xF) - 8) * d for j < 16 and ((qs[j - 16] >> 4) - 8) * d above.
#include "server/model/dequantize_kernels.h"

namespace tpserve::model::kernels {

void DequantizeQ4_0(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 18;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes, dst += 32) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

}  // namespace tpserve::model::kernels
