// File: kernels/cpu/quant/block_dot.h
//
// AVX2 building blocks of the integer formats' tiles (formats.h): exact int8 dot products of
// 32-value blocks, and Tile32, the tile of the formats with 32-value blocks (Q8_0, Q4_0,
// Q4_1) parameterised by how one block unpacks. Header-only (inline); thread-safe. Included
// only by the kernels' own .cc files, compiled with -mavx2 -mfma -mf16c -ffp-contract=off.
#ifndef TPSERVE_KERNELS_CPU_QUANT_BLOCK_DOT_H_
#define TPSERVE_KERNELS_CPU_QUANT_BLOCK_DOT_H_

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {

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

// A format with 32-value blocks, unpacked by Block::Load(block bytes, &q, &d, &m) into 32
// bytes q, scale d and offset m such that value l = d * q[l] + m; Block::kSigned tells
// whether q is signed. kOffset says whether m can be non-zero. Per output:
//   y = HorizontalSum(sum over blocks of float(q . xq) * (d * dx))  +  sum over blocks of m * ds
// both sums in block order.
template <class Block, int MR, int NR>
void Tile32(const uint8_t* w, int64_t w_stride, const Q8Block* x, int64_t x_stride, int64_t k,
            float* y, int64_t ldy) {
  const int64_t nb = k / 32;
  __m256 acc[MR][NR];
  float off[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      acc[i][j] = _mm256_setzero_ps();
      off[i][j] = 0.0f;
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wq[NR];
    __m256 wd[NR];
    float wm[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      _mm_prefetch(
          reinterpret_cast<const char*>(w + j * w_stride + b * Block::kBytes) + kPrefetchBytes,
          _MM_HINT_T0);
      float d;
      Block::Load(w + j * w_stride + b * Block::kBytes, &wq[j], &d, &wm[j]);
      wd[j] = _mm256_set1_ps(d);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const Q8Block& xb = x[i * x_stride + b];
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
      const __m256 dx = _mm256_set1_ps(xb.d);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        const __m256i isum = Block::kSigned ? DotS8S8(wq[j], xq) : DotU8S8(wq[j], xq);
        // float(isum) * (dw * dx) on 8 lanes: the product of two broadcasts is the scalar
        // product in every lane.
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(wd[j], dx), acc[i][j]);
        if constexpr (Block::kOffset) off[i][j] += wm[j] * xb.ds;
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = HorizontalSum(acc[i][j]) + off[i][j];
  }
}

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

// The QuantTileFn of a 32-value-block format.
template <class Block>
struct Tile32Of {
  template <int MR, int NR>
  struct At {
    static void Run(const uint8_t* w, int64_t w_stride, const Q8Block* x, int64_t x_stride,
                    int64_t k, float* y, int64_t ldy) {
      Tile32<Block, MR, NR>(w, w_stride, x, x_stride, k, y, ldy);
    }
  };
  static void Run(const uint8_t* w, int64_t w_stride, int nr, const Q8Block* x, int64_t x_stride,
                  int mr, int64_t k, float* y, int64_t ldy) {
    DispatchTile<At>(mr, nr, w, w_stride, x, x_stride, k, y, ldy);
  }
};

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_BLOCK_DOT_H_
