// Q4_1. block_q4_1 (20 bytes, 32 values): f16 d; f16 m; uint8 qs[16].
// Value j = (qs[j] & 0xF) * d + m for j < 16 and (qs[j - 16] >> 4) * d + m above.
#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/formats.h"

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
  static constexpr bool kOffset = true;
  static void Load(const uint8_t* blk, __m256i* q, float* d, float* m) {
    *d = LoadF16Fast(blk);
    *m = LoadF16Fast(blk + 2);
    *q = UnpackNibbles(blk + 4);
  }
};

}  // namespace

const FormatKernels kQ4_1Kernels = {WeightFormat::kQ4_1,      "Q4_1", 32, 20, DequantizeQ4_1,
                                    Tile32Of<Q4_1Block>::Run, nullptr};

}  // namespace tpserve::kernels::cpu
