// Q6_K. block_q6_K (210 bytes, 256 values): uint8 ql[128] (low 4 bits); uint8 qh[64]
// (high 2 bits); int8 scales[16] (one per 16 values); f16 d.
// Each half h (128 values) uses ql[64h .. 64h+64), qh[32h .. 32h+32), scales[8h .. 8h+8).
// For l < 32 the four values l, l+32, l+64, l+96 of the half are
//   (ql[l] & 0xF | qh[l] bits 0-1 << 4), (ql[l+32] & 0xF | bits 2-3 << 4),
//   (ql[l] >> 4 | bits 4-5 << 4),        (ql[l+32] >> 4 | bits 6-7 << 4),
// each minus 32, times d * scales[value_index_in_half / 16].
#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/block_dot_k.h"
#include "kernels/cpu/quant/formats.h"

namespace tpserve::kernels::cpu {
namespace {

void DequantizeQ6_K(const uint8_t* src, int64_t n_blocks, float* dst) {
  constexpr int kBlockBytes = 210;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = LoadF16(src + 208);
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, scales += 8, dst += 128) {
      float ds[8];  // d * scale for each run of 16 values of this half
      for (int s = 0; s < 8; ++s) ds[s] = d * static_cast<float>(scales[s]);
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = ds[is + 0] * static_cast<float>(q1);
        dst[l + 32] = ds[is + 2] * static_cast<float>(q2);
        dst[l + 64] = ds[is + 4] * static_cast<float>(q3);
        dst[l + 96] = ds[is + 6] * static_cast<float>(q4);
      }
    }
  }
}

// TileK format (block_dot_k.h). Sub-block s = 4h + t is value run t (0..3) of half h: the
// unsigned 6-bit quants u (0..63) of values 32t .. 32t+32 of the half, scales[8h + 2t] for its
// first 16 values and scales[8h + 2t + 1] for its last 16; dw = d, no min term.
// Lane l of the int32 lanes is sc * sum over its 4 values of (u - 32) * x, sc that of lanes
// 0-3 (bytes 0-15) or 4-7 (bytes 16-31), computed exactly as
//   madd_epi16(maddubs(u, x) - maddubs(32, x), [sc_a x 8 | sc_b x 8])
// (int16 pair sums |(u - 32) * x| <= 2 * 32 * 127 and the int32 lanes <= 2^21: no saturation),
// which equals mullo_epi32(DotS8S8(u - 32, x), [sc_a x 4 | sc_b x 4]) lane for lane.
struct Q6_KFormat {
  static constexpr int kBytes = 210;
  static constexpr bool kOffset = false;
  struct Scales {
    alignas(32) int16_t sc[16];  // the 16 int8 scales, sign-extended
  };
  struct Sub {
    __m256i q;   // u, 0..63
    __m256i sc;  // int16 lanes 0-7: scale of bytes 0-15; lanes 8-15: of bytes 16-31
  };
  using XPrep = __m256i;  // maddubs(32, x): int16 lane p = 32 * (x[2p] + x[2p + 1])
  static void LoadScales(const uint8_t* blk, Scales* s, __m256* dw, __m256*) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    _mm256_store_si256(reinterpret_cast<__m256i*>(s->sc), _mm256_cvtepi8_epi16(sc8));
    *dw = _mm256_set1_ps(LoadF16Fast(blk + 208));
  }
  template <int S>
  static Sub Unpack(const uint8_t* blk, const Scales& s) {
    constexpr int kHalf = S / 4, kRun = S % 4;
    const __m256i l =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * kHalf + 32 * (kRun % 2)));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * kHalf));
    const __m256i low4 =
        _mm256_and_si256(kRun < 2 ? l : _mm256_srli_epi16(l, 4), _mm256_set1_epi8(0x0F));
    // Bits 2 * kRun, 2 * kRun + 1 of each qh byte to bits 4, 5 of the same byte.
    __m256i h45;
    if constexpr (kRun == 0) {
      h45 = _mm256_slli_epi16(h, 4);
    } else if constexpr (kRun == 1) {
      h45 = _mm256_slli_epi16(h, 2);
    } else if constexpr (kRun == 2) {
      h45 = h;
    } else {
      h45 = _mm256_srli_epi16(h, 2);
    }
    const __m256i q = _mm256_or_si256(low4, _mm256_and_si256(h45, _mm256_set1_epi8(0x30)));
    // int16 pair (scales[2S], scales[2S + 1]) to all 32-bit lanes, then word 0 to the low
    // 128 bits' int16 lanes and word 1 to the high ones.
    int32_t pair;
    std::memcpy(&pair, s.sc + 2 * S, sizeof(pair));
    const __m256i sc =
        _mm256_shuffle_epi8(_mm256_set1_epi32(pair),
                            _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                             2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
    return {q, sc};
  }
  static XPrep PrepX(__m256i xq) { return _mm256_maddubs_epi16(_mm256_set1_epi8(32), xq); }
  static __m256i Dot(const Sub& sub, __m256i xq, XPrep x32) {
    return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(sub.q, xq), x32), sub.sc);
  }
};

}  // namespace

const FormatKernels kQ6_KKernels = {.format = WeightFormat::kQ6_K,
                                    .name = "Q6_K",
                                    .block_values = 256,
                                    .block_bytes = 210,
                                    .dequantize = DequantizeQ6_K,
                                    .tiles32 = nullptr,
                                    .quant_tile = TileKOf<Q6_KFormat>::Run,
                                    .float_tile = nullptr,
                                    .interleaved8 = nullptr};

}  // namespace tpserve::kernels::cpu
