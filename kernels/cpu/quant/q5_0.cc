// Q5_0. block_q5_0 (22 bytes, 32 values): f16 d; uint8 qh[4]; uint8 qs[16].
// Value j = (q_j - 16) * d, q_j 5 bits: the low 4 from qs (low nibbles of qs[j] for j < 16, high
// nibbles of qs[j - 16] above) and bit 4 from bit j of qh (a little-endian uint32).
#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/tile32.h"

namespace tpserve::kernels::cpu {
namespace {

constexpr int kQhOffset = 2;
constexpr int kQsOffset = 6;

void DequantizeQ5_0(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 22;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes, dst += 32) {
    const float d = LoadF16(src);
    uint8_t q[32];
    FiveBitQuants(src + kQhOffset, src + kQsOffset, q);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(q[j] - 16) * d;
  }
}

// (q - 16) * d = q * d + m with m = -16 d (exact: a power-of-two multiple).
struct Q5_0Block : FiveBitLayout<kQhOffset, kQsOffset> {
  static constexpr int kBytes = 22;
  static constexpr bool kSigned = false;
  static constexpr int kQuantBits = 5;
  static constexpr bool kOffset = true;
  static void Scales(__m256i raw, __m256* d, __m256* m) {
    *d = LowHalvesToFloat(raw);
    *m = _mm256_mul_ps(_mm256_set1_ps(-16.0f), *d);
  }
};

}  // namespace

const FormatKernels kQ5_0Kernels = {.format = WeightFormat::kQ5_0,
                                    .name = "Q5_0",
                                    .block_values = 32,
                                    .block_bytes = 22,
                                    .dequantize = DequantizeQ5_0,
                                    .tiles32 = &Tile32Of<Q5_0Block>::kTiles,
                                    .quant_tile = nullptr,
                                    .float_tile = nullptr,
                                    .interleaved8 = nullptr};

}  // namespace tpserve::kernels::cpu
