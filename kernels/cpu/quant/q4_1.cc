// Q4_1. block_q4_1 (20 bytes, 32 values): f16 d; f16 m; uint8 qs[16].
// Value j = (qs[j] & 0xF) * d + m for j < 16 and (qs[j - 16] >> 4) * d + m above.
#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/tile32.h"

namespace tpserve::kernels::cpu {
namespace {

void DequantizeQ4_1(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 20;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes, dst += 32) {
    const float d = LoadF16(src);
    const float m = LoadF16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(qs[j] & 0xF) * d + m;
      dst[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

struct Q4_1Block {
  static constexpr int kBytes = 20;
  static constexpr bool kSigned = false;
  static constexpr int kQuantBits = 4;
  static constexpr bool kOffset = true;
  static __m256i Quants(const uint8_t* blk) { return UnpackNibbles(blk + 4); }
  static __m256i Group4(const uint8_t* blk, int g) { return NibbleGroup4(blk + 4, g); }
  static void Scales(__m256i raw, __m256* d, __m256* m) {
    *d = LowHalvesToFloat(raw);
    *m = HighHalvesToFloat(raw);
  }
};

}  // namespace

const FormatKernels kQ4_1Kernels = {.format = WeightFormat::kQ4_1,
                                    .name = "Q4_1",
                                    .block_values = 32,
                                    .block_bytes = 20,
                                    .dequantize = DequantizeQ4_1,
                                    .tiles32 = &Tile32Of<Q4_1Block>::kTiles,
                                    .quant_tile = nullptr,
                                    .float_tile = nullptr,
                                    .interleaved8 = nullptr};

}  // namespace tpserve::kernels::cpu
