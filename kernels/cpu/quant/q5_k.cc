// Q5_K. block_q5_K (176 bytes, 256 values): f16 d; f16 dmin; uint8 scales[12] (as
// Q4_K); uint8 qh[32] (fifth bits); uint8 qs[128] (low nibbles).
// Chunk c (64 values) uses qs[32c .. 32c+32) and bits 2c (first 32) and 2c+1 (second 32) of
// qh[0..32): value = d * sc * (nibble | bit << 4) - dmin * m.
#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/block_dot_k.h"
#include "kernels/cpu/quant/formats.h"

namespace tpserve::kernels::cpu {
namespace {

void DequantizeQ5_K(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 176;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes) {
    const float d = LoadF16(src);
    const float dmin = LoadF16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* ql = src + 48;
    for (int chunk = 0; chunk < 4; ++chunk, ql += 32, dst += 64) {
      uint8_t sc, m;
      ScaleMinK4(2 * chunk, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(2 * chunk + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const int shift_lo = 2 * chunk, shift_hi = 2 * chunk + 1;
      for (int l = 0; l < 32; ++l) {
        const int lo = (ql[l] & 0xF) | (((qh[l] >> shift_lo) & 1) << 4);
        const int hi = (ql[l] >> 4) | (((qh[l] >> shift_hi) & 1) << 4);
        dst[l] = d1 * static_cast<float>(lo) - m1;
        dst[l + 32] = d2 * static_cast<float>(hi) - m2;
      }
    }
  }
}

// TileK format (block_dot_k.h). Sub-block s is chunk s / 2's low (s even) or high nibbles
// with bit s of qh[l] as bit 4: 32 unsigned quants 0..31 against x's int8s,
// dw = d * sc[s], mw = -(dmin * m[s]).
struct Q5_KFormat {
  static constexpr int kBytes = 176;
  static constexpr bool kOffset = true;
  struct Scales {};
  using Sub = __m256i;  // the 32 quants
  struct XPrep {};
  static void LoadScales(const uint8_t* blk, Scales*, __m256* dw, __m256* mw) {
    ScalesMinsK4(blk + 4, LoadF16Fast(blk), LoadF16Fast(blk + 2), dw, mw);
  }
  template <int S>
  static Sub Unpack(const uint8_t* blk, const Scales&) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 48 + 32 * (S / 2)));
    const __m256i nib =
        _mm256_and_si256(S % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
    // Bit S of each qh byte to bit 4 of the same byte (16-bit shifts by at most 4 to the left or
    // 3 to the right never bring a neighbouring byte's bit there).
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
    __m256i h4;
    if constexpr (S < 4) {
      h4 = _mm256_slli_epi16(h, 4 - S);
    } else if constexpr (S == 4) {
      h4 = h;
    } else {
      h4 = _mm256_srli_epi16(h, S - 4);
    }
    return _mm256_or_si256(nib, _mm256_and_si256(h4, _mm256_set1_epi8(0x10)));
  }
  static XPrep PrepX(__m256i) { return {}; }
  static __m256i Dot(const Sub& sub, __m256i xq, XPrep) { return DotU8S8(sub, xq); }
};

}  // namespace

const FormatKernels kQ5_KKernels = {.format = WeightFormat::kQ5_K,
                                    .name = "Q5_K",
                                    .block_values = 256,
                                    .block_bytes = 176,
                                    .dequantize = DequantizeQ5_K,
                                    .tiles32 = nullptr,
                                    .quant_tile = TileKOf<Q5_KFormat>::Run,
                                    .float_tile = nullptr,
                                    .interleaved8 = nullptr};

}  // namespace tpserve::kernels::cpu
