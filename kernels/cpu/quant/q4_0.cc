// Q4_0. block_q4_0 (18 bytes, 32 values): f16 d; uint8 qs[16].
// Value j = ((qs[j] & 0xF) - 8) * d for j < 16 and ((qs[j - 16] >> 4) - 8) * d above.
#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/formats.h"

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
  static constexpr bool kOffset = true;
  static void Load(const uint8_t* blk, __m256i* q, float* d, float* m) {
    *d = LoadF16Fast(blk);
    *m = -8.0f * *d;
    *q = UnpackNibbles(blk + 2);
  }
};

}  // namespace

const FormatKernels kQ4_0Kernels = {WeightFormat::kQ4_0,      "Q4_0", 32, 18, DequantizeQ4_0,
                                    Tile32Of<Q4_0Block>::Run, nullptr};

}  // namespace tpserve::kernels::cpu
