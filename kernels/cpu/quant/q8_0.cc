// Q8_0. block_q8_0 (34 bytes, 32 values): f16 d; int8 qs[32]. Value j = qs[j] * d.
// Its tiles read its rows interleaved 8 at a time (interleaved8.h), packed at load.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/interleaved8.h"

namespace tpserve::kernels::cpu {
namespace {

void DequantizeQ8_0(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 34;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes, dst += 32) {
    const float d = LoadF16(src);
    const auto* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

}  // namespace

void QuantizeQ8_0(const float* src, int64_t n_blocks, uint8_t* dst) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 32, dst += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(dst, &h, 2);
    for (int j = 0; j < 32; ++j) {
      dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(src[j] * id)));
    }
  }
}

const FormatKernels kQ8_0Kernels = {.format = WeightFormat::kQ8_0,
                                    .name = "Q8_0",
                                    .block_values = 32,
                                    .block_bytes = 34,
                                    .dequantize = DequantizeQ8_0,
                                    .tiles32 = nullptr,
                                    .quant_tile = nullptr,
                                    .float_tile = nullptr,
                                    .interleaved8 = &Interleaved8Q8_0::kLayout};

}  // namespace tpserve::kernels::cpu
