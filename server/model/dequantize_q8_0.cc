// Q8_0 to f32. block_q8_0 (34 bytes, 32 values): f16 d; int8 qs[32]. Value j = qs[j] * d.
#include "server/model/dequantize_kernels.h"

namespace tpserve::model::kernels {

void DequantizeQ8_0(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 34;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes, dst += 32) {
    const float d = LoadF16(src);
    const auto* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

}  // namespace tpserve::model::kernels
