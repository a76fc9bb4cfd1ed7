// Q4_K. block_q4_K (144 bytes, 256 values): f16 d; f16 dmin; uint8 scales[12] (eight
// 6-bit scale/min pairs, see ScaleMinK4); uint8 qs[128].
// The 256 values are 4 chunks of 64 backed by 32 bytes of qs each: value l of the chunk's
// first 32 is d * sc[2c] * (qs[l] & 0xF) - dmin * m[2c], of its second 32
// d * sc[2c+1] * (qs[l] >> 4) - dmin * m[2c+1].
#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/block_dot_k.h"
#include "kernels/cpu/quant/formats.h"

namespace tpserve::kernels::cpu {
namespace {

void DequantizeQ4_K(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 144;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes) {
    const float d = LoadF16(src);
    const float dmin = LoadF16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    for (int chunk = 0; chunk < 4; ++chunk, q += 32, dst += 64) {
      uint8_t sc, m;
      ScaleMinK4(2 * chunk, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(2 * chunk + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) {
        dst[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
        dst[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
      }
    }
  }
}

// TileK format (block_dot_k.h). Sub-block s is chunk s / 2's low (s even) or high nibbles:
// 32 unsigned quants 0..15 against x's int8s, dw = d * sc[s], mw = -(dmin * m[s]).
struct Q4_KFormat {
  static constexpr int kBytes = 144;
  static constexpr bool kOffset = true;
  struct Scales {};
  using Sub = __m256i;  // the 32 quants
  struct XPrep {};
  static void LoadScales(const uint8_t* blk, Scales*, __m256* dw, __m256* mw) {
    ScalesMinsK4(blk + 4, LoadF16Fast(blk), LoadF16Fast(blk + 2), dw, mw);
  }
  template <int S>
  static Sub Unpack(const uint8_t* blk, const Scales&) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * (S / 2)));
    const __m256i nib = S % 2 == 0 ? v : _mm256_srli_epi16(v, 4);
    return _mm256_and_si256(nib, _mm256_set1_epi8(0x0F));
  }
  static XPrep PrepX(__m256i) { return {}; }
  static __m256i Dot(const Sub& sub, __m256i xq, XPrep) { return DotU8S8(sub, xq); }
};

}  // namespace

const FormatKernels kQ4_KKernels = {.format = WeightFormat::kQ4_K,
                                    .name = "Q4_K",
                                    .block_values = 256,
                                    .block_bytes = 144,
                                    .dequantize = DequantizeQ4_K,
                                    .tiles32 = nullptr,
                                    .quant_tile = TileKOf<Q4_KFormat>::Run,
                                    .float_tile = nullptr,
                                    .interleaved8 = nullptr};

}  // namespace tpserve::kernels::cpu
