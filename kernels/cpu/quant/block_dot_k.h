// File: kernels/cpu/quant/block_dot_k.h
//
// The tile of the K-quant formats (Q4_K, Q5_K, Q6_K: 256-value super-blocks of eight 32-value
// sub-blocks), built on block_dot.h, and helpers they share. Header-only (inline); thread-safe.
// Included only by the kernels' own .cc files, compiled with -mavx2 -mfma -mf16c
// -ffp-contract=off.
//
// Per output y[i, j], per sub-block s of x row i's Q8Block xb (super-block b's Q8Blocks are
// 8b .. 8b+7 of the row), in sub-block order:
//   acc = ScaleAdd(isum_s, dw_s, xb.d, acc)       isum_s: 8 exact int32 lanes (lane l from
//                                                  values 4l .. 4l+3 of the sub-block)
//   off += mw_s * xb.ds                            (formats with a min term only)
// then y = HorizontalSum(acc) + off. dw_s, mw_s and the integer lanes depend only on the weight
// row and x row, never on the tile shape, so every output sees the same float operations.
#ifndef TPSERVE_KERNELS_CPU_QUANT_BLOCK_DOT_K_H_
#define TPSERVE_KERNELS_CPU_QUANT_BLOCK_DOT_K_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {

// The eight sub-block scales and mins of a Q4_K / Q5_K super-block from its 12 packed bytes,
// as floats, lane s: *dw = d * scale_s, *mw = -(dmin * min_s), with scale_s, min_s exactly
// ScaleMinK4(s, scales) (formats.h), all eight decoded at once.
inline void ScalesMinsK4(const uint8_t* scales, float d, float dmin, __m256* dw, __m256* mw) {
  uint32_t u[3];
  std::memcpy(u, scales, sizeof(u));
  constexpr uint32_t kLow6 = 0x3F3F3F3F, kLow4 = 0x0F0F0F0F, kLow2 = 0x03030303;
  const uint32_t sc_lo = u[0] & kLow6;                                         // scales 0..3
  const uint32_t m_lo = u[1] & kLow6;                                          // mins 0..3
  const uint32_t sc_hi = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);        // scales 4..7
  const uint32_t m_hi = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);  // mins 4..7
  const __m128i sc8 = _mm_cvtsi64_si128(static_cast<int64_t>(sc_lo | uint64_t{sc_hi} << 32));
  const __m128i m8 = _mm_cvtsi64_si128(static_cast<int64_t>(m_lo | uint64_t{m_hi} << 32));
  const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc8));
  const __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8));
  *dw = _mm256_mul_ps(_mm256_set1_ps(d), scf);
  *mw = _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), mf),
                      _mm256_set1_ps(-0.0f));  // exact negation
}

// Per-sub-block floats of up to 4 weight rows, sub-block-major so that one 4-lane vector holds
// sub-block s of all the rows: at(s) = {row 0, 1, 2, 3}.
struct SubBlockTableK {
  alignas(32) float v[4][8];  // sub-block s, row j at v[s % 4][4 * (s / 4) + j]

  const float* at(int s) const { return &v[s % 4][4 * (s / 4)]; }

  // From rows[j] (lane s = sub-block s of row j), j < 4: a 4 x 8 transpose.
  void Set(const __m256 rows[4]) {
    const __m256 t0 = _mm256_unpacklo_ps(rows[0], rows[1]);  // r0[0] r1[0] r0[1] r1[1] | +4
    const __m256 t1 = _mm256_unpackhi_ps(rows[0], rows[1]);  // r0[2] r1[2] r0[3] r1[3] | +4
    const __m256 t2 = _mm256_unpacklo_ps(rows[2], rows[3]);
    const __m256 t3 = _mm256_unpackhi_ps(rows[2], rows[3]);
    _mm256_store_ps(v[0], _mm256_shuffle_ps(t0, t2, 0x44));  // sub-blocks 0 | 4
    _mm256_store_ps(v[1], _mm256_shuffle_ps(t0, t2, 0xEE));  // 1 | 5
    _mm256_store_ps(v[2], _mm256_shuffle_ps(t1, t3, 0x44));  // 2 | 6
    _mm256_store_ps(v[3], _mm256_shuffle_ps(t1, t3, 0xEE));  // 3 | 7
  }
};

// The 32 int8s of an activation block.
inline __m256i LoadQ(const Q8Block* xb) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb->q));
}

// The tile of a K-quant format F, which provides:
//   kBytes                       bytes per super-block;
//   kOffset                      whether it has a min term (mw_s);
//   Scales                       per weight row and super-block, what Unpack needs:
//                                F::LoadScales(blk, &scales, &dw, &mw) also sets dw, mw
//                                (__m256, lane s: dw_s, mw_s; mw unused without kOffset);
//   F::Unpack<S>(blk, scales)    sub-block S (0..7) of one weight row, unpacked (F::Sub);
//   XPrep                        per x row and sub-block: F::PrepX(xq) from its 32 int8s;
//   F::Dot(sub, xq, xprep)       the sub-block's exact int32 lanes (isum_s above).
// Weights are unpacked once per super-block / sub-block per weight row and reused over the MR
// x rows. The float products dw_s * xb.d and mw_s * xb.ds are computed for the NR weight rows
// at once, one lane each (lane j's operations are those of a scalar product: the same
// whatever NR), and `off` keeps the NR outputs of an x row in the lanes of one vector.
template <class F, int MR, int NR>
void TileK(const uint8_t* w, int64_t w_stride, const Q8Block* x, int64_t x_stride, int64_t k,
           float* y, int64_t ldy) {
  static_assert(NR >= 1 && NR <= 4);
  const int64_t nsb = k / 256;
  __m256 acc[MR][NR];
  __m128 off[MR];  // lane j: the offset sum of output (i, j)
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    off[i] = _mm_setzero_ps();
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nsb; ++b) {
    const uint8_t* blk[NR];
    typename F::Scales scales[NR];
    __m256 dw_rows[4], mw_rows[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      if (j < NR) {
        blk[j] = w + j * w_stride + b * F::kBytes;
        F::LoadScales(blk[j], &scales[j], &dw_rows[j], &mw_rows[j]);
      } else {
        dw_rows[j] = mw_rows[j] = _mm256_setzero_ps();
      }
    }
    SubBlockTableK dw, mw;
    dw.Set(dw_rows);
    if constexpr (F::kOffset) mw.Set(mw_rows);
    const Q8Block* xs = x + b * 8;
    UnrollK<8>([&](auto s) {
      constexpr int S = decltype(s)::value;
      const Q8Block* xb[MR];
      typename F::XPrep xp[MR];
      alignas(16) float dwdx[MR][4];  // [i][j]: dw_S of row j * xb.d of row i
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        xb[i] = xs + i * x_stride + S;
        xp[i] = F::PrepX(LoadQ(xb[i]));
        _mm_store_ps(dwdx[i], _mm_mul_ps(_mm_load_ps(dw.at(S)), _mm_set1_ps(xb[i]->d)));
        if constexpr (F::kOffset) {
          off[i] = _mm_add_ps(off[i], _mm_mul_ps(_mm_load_ps(mw.at(S)), _mm_set1_ps(xb[i]->ds)));
        }
      }
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        const typename F::Sub sub = F::template Unpack<S>(blk[j], scales[j]);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) {
          // ScaleAdd (block_dot.h) with the product dw * dx taken from its lane.
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(F::Dot(sub, LoadQ(xb[i]), xp[i])),
                                      _mm256_broadcast_ss(&dwdx[i][j]), acc[i][j]);
        }
      }
    });
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    alignas(16) float o[4];
    _mm_store_ps(o, off[i]);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = HorizontalSum(acc[i][j]) + o[j];
  }
}

// The QuantTileFn of a K-quant format.
template <class F>
struct TileKOf {
  template <int MR, int NR>
  struct At {
    static void Run(const uint8_t* w, int64_t w_stride, const Q8Block* x, int64_t x_stride,
                    int64_t k, float* y, int64_t ldy) {
      TileK<F, MR, NR>(w, w_stride, x, x_stride, k, y, ldy);
    }
  };
  static void Run(const uint8_t* w, int64_t w_stride, int nr, const Q8Block* x, int64_t x_stride,
                  int mr, int64_t k, float* y, int64_t ldy) {
    DispatchTile<At>(mr, nr, w, w_stride, x, x_stride, k, y, ldy);
  }
};

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_BLOCK_DOT_K_H_
