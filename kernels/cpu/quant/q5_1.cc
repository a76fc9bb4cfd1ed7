// Q5_1. block_q5_1 (24 bytes, 32 values): f16 d; f16 m; uint8 qh[4]; uint8 qs[16].
// Value j = q_j * d + m, q_j 5 bits as Q5_0's (q5_0.cc).
#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/tile32.h"

namespace tpserve::kernels::cpu {
namespace {

constexpr int kQhOffset = 4;
constexpr int kQsOffset = 8;

void DequantizeQ5_1(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 24;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes, dst += 32) {
    const float d = LoadF16(src);
    const float m = LoadF16(src + 2);
    uint8_t q[32];
    FiveBitQuants(src + kQhOffset, src + kQsOffset, q);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(q[j]) * d + m;
  }
}

struct Q5_1Block : FiveBitLayout<kQhOffset, kQsOffset> {
  static constexpr int kBytes = 24;
  static constexpr bool kSigned = false;
  static constexpr int kQuantBits = 5;
  static constexpr bool kOffset = true;
  static void Scales(__m256i raw, __m256* d, __m256* m) {
    *d = LowHalvesToFloat(raw);
    *m = HighHalvesToFloat(raw);
  }
};

}  // namespace

const FormatKernels kQ5_1Kernels = {.format = WeightFormat::kQ5_1,
                                    .name = "Q5_1",
                                    .block_values = 32,
                                    .block_bytes = 24,
                                    .dequantize = DequantizeQ5_1,
                                    .tiles32 = &Tile32Of<Q5_1Block>::kTiles,
                                    .quant_tile = nullptr,
                                    .float_tile = nullptr,
                                    .interleaved8 = nullptr};

}  // namespace tpserve::kernels::cpu
