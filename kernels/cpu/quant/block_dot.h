// File: kernels/cpu/quant/block_dot.h
//
// AVX2 building blocks of the integer formats' tiles (tile32.h, block_dot_k.h): exact int8 dot
// products of 32-value blocks, nibble unpacking, and the dispatch of runtime tile shapes to
// template instantiations. Header-only (inline); thread-safe. Included
// only by the kernels' own .cc files, compiled with -mavx2 -mfma -mf16c -ffp-contract=off.
#ifndef TPSERVE_KERNELS_CPU_QUANT_BLOCK_DOT_H_
#define TPSERVE_KERNELS_CPU_QUANT_BLOCK_DOT_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {

// f(std::integral_constant<int, 0>{}), ..., f(std::integral_constant<int, N - 1>{}): a loop
// whose index is a compile-time constant in its body (shift counts, byte offsets).
template <int N, class F>
inline void UnrollK(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }
  (std::make_integer_sequence<int, N>{});
}

// 8 int32 lanes, lane l = sum of w[4l..4l+3] * x[4l..4l+3]; w unsigned (0..255, products
// summed in pairs into int16 without saturation for w <= 128), x signed (-127..127).
inline __m256i DotU8S8(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

// The same with w signed (-128..127): |w| against x with w's sign.
inline __m256i DotS8S8(__m256i w, __m256i x) {
  return DotU8S8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

// 16 packed bytes -> 32 values 0..15: low nibbles first (values 0..15), then high nibbles.
inline __m256i UnpackNibbles(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low_mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(v, low_mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low_mask);
  return _mm256_set_m128i(hi, lo);
}

// The 4 bytes at p broadcast to 8 lanes (one load).
inline __m256i Broadcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// Values 4g .. 4g+3 of UnpackNibbles(qs) broadcast to 8 lanes: low nibbles of qs[4g..] for
// g < 4, high nibbles of qs[4(g-4)..] above (g a constant once unrolled).
inline __m256i NibbleGroup4(const uint8_t* qs, int g) {
  const __m256i v = Broadcast4(qs + 4 * (g % 4));
  const __m256i nib = g < 4 ? v : _mm256_srli_epi16(v, 4);
  return _mm256_and_si256(nib, _mm256_set1_epi8(0x0F));
}

// The 5-bit quants of Q5_0 / Q5_1 (32 values): the low 4 bits from the 16 bytes qs (as
// UnpackNibbles orders them), bit 4 of value j from bit j of the little-endian uint32 at qh.
inline void FiveBitQuants(const uint8_t* qh, const uint8_t* qs, uint8_t q[32]) {
  uint32_t h;
  std::memcpy(&h, qh, sizeof(h));
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<uint8_t>((qs[j] & 0xF) | (((h >> j) & 1) << 4));
    q[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | (((h >> (j + 16)) & 1) << 4));
  }
}

// The same as 32 bytes 0..31, in value order.
inline __m256i UnpackFiveBits(const uint8_t* qh, const uint8_t* qs) {
  int32_t h;
  std::memcpy(&h, qh, sizeof(h));
  // Byte j takes qh's byte j / 8, then keeps its bit j % 8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(h), _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                              0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(UnpackNibbles(qs), _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

// Quants and Group4 of a 5-bit format's Block (tile32.h) whose qh and qs sit at these offsets.
// Group4 takes its group out of the whole block's unpacked quants (Rows8 asks for the 8 groups
// of one block in a row, so the unpacking is shared): 1.34x faster at m = 16 than assembling
// each group's 4 bytes from qs and qh in scalar code (VNNI, 1536 x 576).
template <int kQhOffset, int kQsOffset>
struct FiveBitLayout {
  static __m256i Quants(const uint8_t* blk) {
    return UnpackFiveBits(blk + kQhOffset, blk + kQsOffset);
  }
  static __m256i Group4(const uint8_t* blk, int g) {
    return _mm256_permutevar8x32_epi32(Quants(blk), _mm256_set1_epi32(g));
  }
};

// An unaligned half at p through F16C (exact for the finite scales of a validated file).
inline float LoadF16Fast(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _cvtsh_ss(h);
}

// One block's contribution to an output: acc += float(isum) * (dw * dx) on 8 lanes.
inline __m256 ScaleAdd(__m256i isum, float dw, float dx, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * dx), acc);
}

// How far ahead of its reads a tile prefetches each weight row (past the row's end: the next
// tile's rows, which follow in memory). Decode streams weights from DRAM in short rows that the
// hardware prefetcher alone does not run far enough ahead of.
inline constexpr int64_t kPrefetchBytes = 256;

// Runtime mr, nr (1..4) -> the Tile template instantiation; `Tile` is a template
// <int MR, int NR> struct with a static Run(args...).
template <template <int, int> class Tile, class... Args>
void DispatchTile(int mr, int nr, Args... args) {
#define TPSERVE_TILE_ROW(MR)            \
  switch (nr) {                         \
    case 1:                             \
      return Tile<MR, 1>::Run(args...); \
    case 2:                             \
      return Tile<MR, 2>::Run(args...); \
    case 3:                             \
      return Tile<MR, 3>::Run(args...); \
    default:                            \
      return Tile<MR, 4>::Run(args...); \
  }
  switch (mr) {
    case 1:
      TPSERVE_TILE_ROW(1)
    case 2:
      TPSERVE_TILE_ROW(2)
    case 3:
      TPSERVE_TILE_ROW(3)
    default:
      TPSERVE_TILE_ROW(4)
  }
#undef TPSERVE_TILE_ROW
}

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_BLOCK_DOT_H_
