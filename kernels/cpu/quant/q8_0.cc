// Q8_0. block_q8_0 (34 bytes, 32 values): f16 d; int8 qs[32]. Value j = qs[j] * d.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/tile32.h"

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

struct Q8_0Block {
  static constexpr int kBytes = 34;
  static constexpr bool kSigned = true;
  static constexpr bool kOffset = false;
  static __m256i Quants(const uint8_t* blk) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  }
  static __m256i Group4(const uint8_t* blk, int g) { return Broadcast4(blk + 2 + 4 * g); }
  static void Scales(__m256i raw, __m256* d, __m256* m) {
    *d = LowHalvesToFloat(raw);
    *m = _mm256_setzero_ps();
  }
};

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
                                    .tiles32 = &Tile32Of<Q8_0Block>::kTiles,
                                    .quant_tile = nullptr,
                                    .float_tile = nullptr};

}  // namespace tpserve::kernels::cpu
