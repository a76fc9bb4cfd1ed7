// File: kernels/cpu/quant/tile32.h
//
// The tiles of the integer formats with 32-value blocks in their file's layout (Q4_0, Q4_1,
// Q5_0, Q5_1; Q8_0
// has its interleaved layout, interleaved8.h), for each instruction set the machine may have
// (QuantIsa: AVX2, or AVX-512 VNNI). Header-only; included only by the formats' own .cc
// files, compiled with -mavx2 -mfma -mf16c -ffp-contract=off; the VNNI instantiations turn on
// AVX-512 per function (gnu::target), so a machine without it never runs them.
//
// A format's Block (one per format file) provides:
//   kBytes                     bytes per block;
//   kSigned                    whether its quants are signed (-128..127) or not;
//   kQuantBits                 unsigned quants' width: 4 (0..15) or 5 (0..31);
//   kOffset                    whether values carry an offset m (value = d * q + m);
//   Block::Quants(blk)         the 32 quants as bytes, in value order;
//   Block::Group4(blk, g)      quants 4g .. 4g+3 as 4 bytes, broadcast to 8 lanes;
//   Block::Scales(raw, &d, &m) from 8 lanes of the block's first 4 bytes, its d and m per lane.
//
// Numerics. Every output y = dot(x row, w row) is, per pair of rows, the scalar sequence
//   acc = 0
//   for each block b, in order:
//     isum = sum over the 32 values of q_w * q_x          (exact, int32)
//     acc  = fma(float(isum), d_w * d_x, acc)
//     acc  = fma(m_w, ds_x, acc)                          (formats with an offset)
//   y = acc
// with each output in one lane of a vector, so whatever the tile, the thread split, the
// instruction set or the rest of the batch, an output sees the same float operations: row i of
// an m-row product equals an m = 1 product of that row, bit for bit, on AVX2 and on VNNI.
// Each tile comes twice, on block_sums.h's FloatBlocks (the sequence above, y f32) and on its
// FixedBlocks (each block's contribution from 0, as exact int64 fixed-point sums).
//
// Three tiles compute the integer sums in two ways:
//   Rows8 (8 rows of x against NR weight rows, for batches and prefill): x interleaved 8 rows at
//     a time (Q8Block8), each 4-byte group of a weight block broadcast against the same group of
//     the 8 rows, so lane r accumulates row r's block sum with no horizontal step;
//   Cols8 (one row of x against 8 weight rows, for decode): each weight row's block product in
//     8 partial lanes, the 8 rows' partials then reduced into one vector, lane j = row j;
//   ColsN (2 to kColsRows rows of x against 8 weight rows, for the few rows of a small batch
//     or a speculative verification): Cols8's products for each row, each weight block's
//     quants and scales unpacked once for all of them.
#ifndef TPSERVE_KERNELS_CPU_QUANT_TILE32_H_
#define TPSERVE_KERNELS_CPU_QUANT_TILE32_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/block_sums.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/q8_activations.h"

namespace tpserve::kernels::cpu {

// Helpers for Block::Scales: 8 lanes of 32-bit words -> their low (or high) halves as floats.
[[gnu::always_inline]] inline __m256 LowHalvesToFloat(__m256i raw) {
  const __m256i low = _mm256_and_si256(raw, _mm256_set1_epi32(0xFFFF));
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(low, low), 0x08);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}
[[gnu::always_inline]] inline __m256 HighHalvesToFloat(__m256i raw) {
  return LowHalvesToFloat(_mm256_srli_epi32(raw, 16));
}

// Weight rows per Rows8 tile.
inline constexpr int kRows8Width = 4;

// The integer products of one instruction set. For a Block type B:
//   Prepare<B>(q)          the weight quants (32, or a broadcast group) as the products take
//                          them;
//   Group<B>(acc, w4, x)   acc += per-lane products of the broadcast 4-byte group w4 with x
//                          (8 lanes of 4 bytes);
//   Merge<B>(a, b)         two accumulations of Group into one;
//   Finish<B>(acc, qsum)   the lanes' exact sums, given x's per-lane sums of quants;
//   Block<B>(q, x)         8 int32 lanes whose total is the exact block product of q and x.
struct Avx2Products {
  template <class B>
  static __m256i Prepare(__m256i q) {
    return q;
  }
  template <class B>
  static __m256i Group(__m256i acc, __m256i w4, __m256i x) {
    if constexpr (B::kSigned) {
      return _mm256_add_epi32(acc, DotS8S8(w4, x));
    } else {
      // Pairs of 0..15 x -127..127 fit int16 eight groups over (8 * 2 * 15 * 127 < 32768), of
      // 0..31 four groups over (4 * 2 * 31 * 127 < 32768): one chain of Rows8's two.
      return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w4, x));
    }
  }
  template <class B>
  static __m256i Merge(__m256i a, __m256i b) {
    if constexpr (B::kSigned) return _mm256_add_epi32(a, b);
    if constexpr (B::kQuantBits == 4) return _mm256_add_epi16(a, b);
    const __m256i ones = _mm256_set1_epi16(1);  // 5 bits: the two chains widened first
    return _mm256_add_epi32(_mm256_madd_epi16(a, ones), _mm256_madd_epi16(b, ones));
  }
  template <class B>
  static __m256i Finish(__m256i acc, __m256i /*qsum*/) {
    if constexpr (B::kSigned || B::kQuantBits != 4) return acc;
    return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
  }
  template <class B>
  static __m256i Block(__m256i q, __m256i x) {
    return B::kSigned ? DotS8S8(q, x) : DotU8S8(q, x);
  }
};

// VNNI: one vpdpbusd per group. Signed quants are offset by 128 to make them unsigned, and
// 128 * sum(x) taken back at the end (exact in int32).
struct VnniProducts {
  template <class B>
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i Prepare(__m256i q) {
    if constexpr (B::kSigned) return _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));
    return q;
  }
  template <class B>
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i Group(__m256i acc,
                                                                               __m256i w4,
                                                                               __m256i x) {
    return _mm256_dpbusd_epi32(acc, w4, x);
  }
  template <class B>
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i Merge(__m256i a,
                                                                               __m256i b) {
    return _mm256_add_epi32(a, b);
  }
  template <class B>
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i Finish(__m256i acc,
                                                                                __m256i qsum) {
    if constexpr (B::kSigned) return _mm256_sub_epi32(acc, _mm256_slli_epi32(qsum, 7));
    return acc;
  }
  template <class B>
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i Block(__m256i q,
                                                                               __m256i x) {
    if constexpr (B::kSigned) {
      return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(q, q),
                                 _mm256_sign_epi8(x, q));
    }
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x);
  }
};

// 8 vectors of 8 int32 lanes -> one vector, lane p = the total of v[p]'s lanes.
[[gnu::always_inline]] inline __m256i SumLanes8(const __m256i v[8]) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);  // per 128-bit half: v0 v0 v1 v1
  const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i q0 = _mm256_hadd_epi32(h01, h23);  // low half: v0..v3 of the low lanes | high
  const __m256i q1 = _mm256_hadd_epi32(h45, h67);
  const __m256i low_high = _mm256_blend_epi32(q0, q1, 0xF0);         // q0 low | q1 high
  const __m256i high_low = _mm256_permute2x128_si256(q0, q1, 0x21);  // q0 high | q1 low
  return _mm256_add_epi32(low_high, high_low);
}

// Blocks whose weight scales Rows8 decodes at once, for all its groups of x rows.
inline constexpr int64_t kRows8ScaleBlocks = 128;

// y[(8g + r) * ldy + j] = dot(x row 8g + r, w row j) for g < groups, r < 8, j < nr
// (<= kRows8Width). w: nr rows of w_stride bytes; x: groups x kb interleaved blocks. The tile's
// weight rows stay in L1 while every group sweeps them; their scales are decoded once per
// tile (when kb <= kRows8ScaleBlocks), into the same floats Cols8 computes.
template <class B, class P, class Adder>
[[gnu::always_inline]] inline void Rows8Body(const uint8_t* w, int64_t w_stride, int nr,
                                             const Q8Block8* x, int64_t groups, int64_t kb,
                                             typename Adder::Out* y, int64_t ldy, int64_t granule) {
  using A = typename Adder::Rows;  // Rows8's accumulators (block_sums.h)
  constexpr int NR = kRows8Width;
  const uint8_t* rows[NR];
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) rows[j] = w + (j < nr ? j : nr - 1) * w_stride;  // past nr: last
  alignas(32) float dw_table[kRows8ScaleBlocks][NR];
  alignas(32) float mw_table[kRows8ScaleBlocks][NR];
  for (int64_t g = 0; g < groups; ++g) {
    const Q8Block8* xg = x + g * kb;
    typename A::Acc acc[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[j] = A::Zero();
    int64_t in_granule = 0;
    for (int64_t b0 = 0; b0 < kb; b0 += kRows8ScaleBlocks) {
      const int64_t b1 = std::min(kb, b0 + kRows8ScaleBlocks);
      if (g == 0 || kb > kRows8ScaleBlocks) {
        for (int64_t b = b0; b < b1; ++b) {
#pragma GCC unroll 4
          for (int j = 0; j < NR; ++j) {
            uint32_t raw;
            std::memcpy(&raw, rows[j] + b * B::kBytes, sizeof(raw));
            __m256 dw, mw;
            B::Scales(_mm256_set1_epi32(static_cast<int>(raw)), &dw, &mw);
            dw_table[b - b0][j] = _mm256_cvtss_f32(dw);
            mw_table[b - b0][j] = _mm256_cvtss_f32(mw);
          }
        }
      }
      for (int64_t b = b0; b < b1; ++b) {
        const Q8Block8& xb = xg[b];
        __m256i xq[8];
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) {
          xq[q] = _mm256_load_si256(reinterpret_cast<const __m256i*>(xb.q + 32 * q));
        }
        const __m256 dx = _mm256_load_ps(xb.d);
        const __m256 dsx = _mm256_load_ps(xb.ds);
        const __m256i qsum = _mm256_load_si256(reinterpret_cast<const __m256i*>(xb.qsum));
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
          const uint8_t* blk = rows[j] + b * B::kBytes;
          // Even and odd groups in two chains, so the products do not wait on each other; each
          // group broadcast straight from the block (a load, no shuffle). A plain unrolled
          // loop: a lambda would be compiled for AVX2 only and call the VNNI products out of
          // line.
          __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
          for (int q = 0; q < 8; ++q) {
            const __m256i w4 = P::template Prepare<B>(B::Group4(blk, q));
            isum[q % 2] = P::template Group<B>(isum[q % 2], w4, xq[q]);
          }
          const __m256i total = P::template Finish<B>(P::template Merge<B>(isum[0], isum[1]), qsum);
          A::Add(acc[j], total, _mm256_broadcast_ss(&dw_table[b - b0][j]), dx,
                 _mm256_broadcast_ss(&mw_table[b - b0][j]), dsx, B::kOffset);
        }
        if constexpr (A::kGranules) {
          if (++in_granule == granule) {
#pragma GCC unroll 4
            for (int j = 0; j < NR; ++j) A::Flush(acc[j]);
            in_granule = 0;
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      if (j >= nr) break;
      typename A::Out out[8];
      A::Store(acc[j], out);
      for (int r = 0; r < 8; ++r) y[(8 * g + r) * ldy + j] = out[r];
    }
  }
}

// y[j] = dot(x, w row j) for j < nr (<= 8). w: nr rows of w_stride bytes; x: kb blocks.
template <class B, class P, class Adder>
[[gnu::always_inline]] inline void Cols8Body(const uint8_t* w, int64_t w_stride, int nr,
                                             const Q8Block* x, int64_t kb, typename Adder::Out* y,
                                             int64_t granule) {
  const uint8_t* rows[8];
  alignas(32) int32_t offsets[8];  // of row j from row 0 (w_stride < 2^31 / 8: rows of k < 2^26)
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    offsets[j] = static_cast<int32_t>((j < nr ? j : nr - 1) * w_stride);  // past nr: the last
    rows[j] = w + offsets[j];
  }
  const __m256i row_offsets = _mm256_load_si256(reinterpret_cast<const __m256i*>(offsets));
  using A = typename Adder::Lone;  // one accumulator (block_sums.h)
  typename A::Acc acc = A::Zero();
  int64_t in_granule = 0;
  for (int64_t b = 0; b < kb; ++b) {
    const Q8Block& xb = x[b];
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
    __m256i partial[8];
    // The next 8 rows (the next tile's, which follow in memory), a slice per block, so they
    // arrive from DRAM while this tile computes.
    const char* next = reinterpret_cast<const char*>(w + 8 * w_stride + b * 8 * B::kBytes);
#pragma GCC unroll 8
    for (int line = 0; line < 8 * B::kBytes; line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      partial[j] = P::template Block<B>(B::Quants(rows[j] + b * B::kBytes), xq);
    }
    // The first 4 bytes of the 8 rows' blocks (their scales).
    const __m256i raw =
        _mm256_i32gather_epi32(reinterpret_cast<const int*>(w + b * B::kBytes), row_offsets, 1);
    __m256 dw, mw;
    B::Scales(raw, &dw, &mw);
    A::Add(acc, SumLanes8(partial), dw, _mm256_set1_ps(xb.d), mw, _mm256_set1_ps(xb.ds),
           B::kOffset);
    if constexpr (A::kGranules) {
      if (++in_granule == granule) {
        A::Flush(acc);
        in_granule = 0;
      }
    }
  }
  typename A::Out out[8];
  A::Store(acc, out);
  for (int j = 0; j < nr; ++j) y[j] = out[j];
}

// y[i * ldy + j] = dot(x row i, w row j) for i < MR (<= kColsRows), j < nr (<= 8). w: nr rows
// of w_stride bytes; x: MR rows of kb blocks, x_stride blocks apart. Each output is Cols8's,
// in the same float operations.
template <class B, class P, class A, int MR>
[[gnu::always_inline]] inline void ColsNBody(const uint8_t* w, int64_t w_stride, int nr,
                                             const Q8Block* x, int64_t x_stride, int64_t kb,
                                             typename A::Out* y, int64_t ldy, int64_t granule) {
  alignas(32) int32_t offsets[8];  // of row j from row 0, as in Cols8
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) offsets[j] = static_cast<int32_t>((j < nr ? j : nr - 1) * w_stride);
  const __m256i row_offsets = _mm256_load_si256(reinterpret_cast<const __m256i*>(offsets));
  typename A::Acc acc[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i] = A::Zero();
  int64_t in_granule = 0;
  for (int64_t b = 0; b < kb; ++b) {
    // The next tile's slice of this block, as Cols8 fetches it ahead.
    const char* next = reinterpret_cast<const char*>(w + 8 * w_stride + b * 8 * B::kBytes);
#pragma GCC unroll 8
    for (int line = 0; line < 8 * B::kBytes; line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
    __m256i q[8];  // the 8 weight rows' quants of block b
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) q[j] = B::Quants(w + offsets[j] + b * B::kBytes);
    const __m256i raw =
        _mm256_i32gather_epi32(reinterpret_cast<const int*>(w + b * B::kBytes), row_offsets, 1);
    __m256 dw, mw;
    B::Scales(raw, &dw, &mw);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const Q8Block& xb = x[i * x_stride + b];
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
      __m256i partial[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) partial[j] = P::template Block<B>(q[j], xq);
      A::Add(acc[i], SumLanes8(partial), dw, _mm256_set1_ps(xb.d), mw, _mm256_set1_ps(xb.ds),
             B::kOffset);
    }
    if constexpr (A::kGranules) {
      if (++in_granule == granule) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) A::Flush(acc[i]);
        in_granule = 0;
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    typename A::Out out[8];
    A::Store(acc[i], out);
    for (int j = 0; j < nr; ++j) y[i * ldy + j] = out[j];
  }
}

// ColsNBody for mr in [MR, kColsRows], through one instantiation per row count.
template <class B, class P, class A, int MR = 2>
[[gnu::always_inline]] inline void ColsNDispatch(const uint8_t* w, int64_t w_stride, int nr,
                                                 const Q8Block* x, int64_t x_stride, int mr,
                                                 int64_t kb, typename A::Out* y, int64_t ldy,
                                                 int64_t granule) {
  if constexpr (MR < kColsRows) {
    if (mr > MR) {
      ColsNDispatch<B, P, A, MR + 1>(w, w_stride, nr, x, x_stride, mr, kb, y, ldy, granule);
      return;
    }
  }
  ColsNBody<B, P, A, MR>(w, w_stride, nr, x, x_stride, kb, y, ldy, granule);
}

// The Tiles32 (formats.h) of a Block, one per instruction set and way of adding (block_sums.h).
template <class B>
struct Tile32Of {
  template <class A>
  static void Rows8Avx2(const uint8_t* w, int64_t w_stride, int nr, const Q8Block8* x,
                        int64_t groups, int64_t kb, typename A::Out* y, int64_t ldy,
                        int64_t granule) {
    Rows8Body<B, Avx2Products, A>(w, w_stride, nr, x, groups, kb, y, ldy, granule);
  }
  template <class A>
  static void Cols8Avx2(const uint8_t* w, int64_t w_stride, int nr, const Q8Block* x, int64_t kb,
                        typename A::Out* y, int64_t granule) {
    Cols8Body<B, Avx2Products, A>(w, w_stride, nr, x, kb, y, granule);
  }
  template <class A>
  static void ColsNAvx2(const uint8_t* w, int64_t w_stride, int nr, const Q8Block* x,
                        int64_t x_stride, int mr, int64_t kb, typename A::Out* y, int64_t ldy,
                        int64_t granule) {
    ColsNDispatch<B, Avx2Products, A>(w, w_stride, nr, x, x_stride, mr, kb, y, ldy, granule);
  }
  template <class A>
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static void Rows8Vnni(
      const uint8_t* w, int64_t w_stride, int nr, const Q8Block8* x, int64_t groups, int64_t kb,
      typename A::Out* y, int64_t ldy, int64_t granule) {
    Rows8Body<B, VnniProducts, A>(w, w_stride, nr, x, groups, kb, y, ldy, granule);
  }
  template <class A>
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static void Cols8Vnni(
      const uint8_t* w, int64_t w_stride, int nr, const Q8Block* x, int64_t kb, typename A::Out* y,
      int64_t granule) {
    Cols8Body<B, VnniProducts, A>(w, w_stride, nr, x, kb, y, granule);
  }
  template <class A>
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static void ColsNVnni(
      const uint8_t* w, int64_t w_stride, int nr, const Q8Block* x, int64_t x_stride, int mr,
      int64_t kb, typename A::Out* y, int64_t ldy, int64_t granule) {
    ColsNDispatch<B, VnniProducts, A>(w, w_stride, nr, x, x_stride, mr, kb, y, ldy, granule);
  }
  template <class A>
  static constexpr Tiles32Fns<typename A::Out> kAvx2 = {Rows8Avx2<A>, Cols8Avx2<A>, ColsNAvx2<A>};
  template <class A>
  static constexpr Tiles32Fns<typename A::Out> kVnni = {Rows8Vnni<A>, Cols8Vnni<A>, ColsNVnni<A>};
  static constexpr Tiles32 kTiles = {
      {{kAvx2<FloatBlocks>, kAvx2<FixedBlocks>}, {kVnni<FloatBlocks>, kVnni<FixedBlocks>}}};
};

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_TILE32_H_
