// Q4_0. block_q4_0 (18 bytes, 32 values): f16 d; uint8 qs[16].
// Value j = ((qs[j] & 0xF) - 8) * d for j < 16 and ((qs[j - 16] >> 4) - 8) * d above.
#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/tile32.h"

namespace tpserve::kernels::cpu {
namespace {

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

// (q - 8) * d = q * d + m with m = -8 d (exact: a power-of-two multiple).
struct Q4_0Block {
  static constexpr int kBytes = 18;
  static constexpr bool kSigned = false;
  static constexpr int kQuantBits = 4;
  static constexpr bool kOffset = true;
  static __m256i Quants(const uint8_t* blk) { return UnpackNibbles(blk + 2); }
  static __m256i Group4(const uint8_t* blk, int g) { return NibbleGroup4(blk + 2, g); }
  static void Scales(__m256i raw, __m256* d, __m256* m) {
    *d = LowHalvesToFloat(raw);
    *m = _mm256_mul_ps(_mm256_set1_ps(-8.0f), *d);
  }
};

}  // namespace

const FormatKernels kQ4_0Kernels = {.format = WeightFormat::kQ4_0,
                                    .name = "Q4_0",
                                    .block_values = 32,
                                    .block_bytes = 18,
                                    .dequantize = DequantizeQ4_0,
                                    .tiles32 = &Tile32Of<Q4_0Block>::kTiles,
                                    .quant_tile = nullptr,
                                    .float_tile = nullptr,
                                    .interleaved8 = nullptr};

}  // namespace tpserve::kernels::cpu
