// File: kernels/cpu/quant/interleaved8.h
//
// Q8_0 rows interleaved 8 at a time, the layout its tiles read (made once at load; see
// weight_layout.h), and those tiles, for each instruction set the machine may have (QuantIsa).
// Header-only; included only by q8_0.cc, compiled with -mavx2 -mfma -mf16c -ffp-contract=off;
// the VNNI instantiations turn on AVX-512 per function (gnu::target), so a machine without it
// never runs them.
//
// Layout. Tile t holds rows 8t .. 8t+7 (rows past n are zero), block after block; block b of a
// tile is kInterleaved8BlockBytes = 272 bytes, the 8 rows' 8 x 34 bytes of the file reordered:
//   uint16 d[8]         row j's f16 scale, at byte 2j
//   int8   q[8][8][4]   quants 4g .. 4g+3 of row j, at byte 16 + 32g + 4j
// so one 32-byte load of group g holds the same 4 quants of all 8 rows (lane j = row j), and
// the 8 rows' scales convert to floats in one instruction.
//
// Tile: mr rows of x (Q8Blocks, q8_activations.h) against `tiles` consecutive tiles (8 outputs
// each). Per block, each weight group is loaded once and multiplied with every x row's same 4
// quants broadcast to 8 lanes, so lane j of a row's accumulator gathers output j's exact integer
// block sum with no horizontal step; then the block's float step runs on 8 outputs at once.
//   AVX2: |w| (once per group and tile) against x with w's signs (maddubs, madd: exact, as
//         DotS8S8);
//   VNNI: w + 128 (unsigned; once per group and tile) against x (vpdpbusd), the accumulator
//         starting from -128 * the x block's sum of quants, so the sum comes out exact.
//
// Numerics: as tile32.h's. Every output y = dot(x row, w row) is the scalar sequence
//   acc = 0; for each block b in order: acc = fma(float(isum_b), d_w * d_x, acc); y = acc
// with isum_b exact in int32, each output in one lane: whatever the tile shape, the rest of the
// batch, the thread split or the instruction set, an output sees the same float operations (and
// the same as Rows8/Cols8 on the file's rows), bit for bit. Like tile32.h's, the tile comes on
// block_sums.h's FloatBlocks (that sequence, y f32) and on its FixedBlocks (y int64).
#ifndef TPSERVE_KERNELS_CPU_QUANT_INTERLEAVED8_H_
#define TPSERVE_KERNELS_CPU_QUANT_INTERLEAVED8_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/block_sums.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/q8_activations.h"

namespace tpserve::kernels::cpu {

inline constexpr int64_t kInterleaved8BlockBytes = 8 * 34;

// How far ahead of its reads a lone row's tile prefetches, in bytes of the weight stream, and
// with the non-temporal hint: weights a decode step streams once need no place in the caches on
// their way out (likely why it is faster: AMD's L3 is a victim cache, which a plain prefetch's
// lines fill when L2 evicts them). kernels_quant_matmul_bench, Q8_0 m = 1, 1 thread,
// alternating: 4 KiB ahead 29-31 GB/s, against 22-23 for T0 four runs of tiles ahead (the
// previous choice) and 24-26 with no software prefetch; 2 and 8 KiB 28-29, 16 KiB and more
// 22-29. engine_throughput on SmolLM2 Q8_0, batch 1, alternating: 1.2-1.7x at 1 thread.
inline constexpr int64_t kDecodePrefetchBytes = 4096;

// rows: [n, k] Q8_0 in the file's layout -> packed: ceil(n / 8) tiles (see Layout above).
inline void PackInterleaved8Q8_0(const uint8_t* rows, int64_t n, int64_t k, uint8_t* packed) {
  const int64_t kb = k / 32;
  const int64_t row_bytes = kb * 34;
  const int64_t tiles = (n + 7) / 8;
  for (int64_t t = 0; t < tiles; ++t) {
    for (int64_t b = 0; b < kb; ++b) {
      uint8_t* dst = packed + (t * kb + b) * kInterleaved8BlockBytes;
      std::memset(dst, 0, kInterleaved8BlockBytes);
      for (int j = 0; j < 8 && 8 * t + j < n; ++j) {
        const uint8_t* src = rows + (8 * t + j) * row_bytes + b * 34;
        std::memcpy(dst + 2 * j, src, 2);
        for (int g = 0; g < 8; ++g) std::memcpy(dst + 16 + 32 * g + 4 * j, src + 2 + 4 * g, 4);
      }
    }
  }
}

// Row `row` of a packed [*, k] -> out: k floats, as ggml's Q8_0 dequantisation (q * d).
inline void DequantizeInterleaved8Q8_0Row(const uint8_t* packed, int64_t k, int64_t row,
                                          float* out) {
  const int64_t kb = k / 32;
  const int64_t t = row / 8;
  const int j = static_cast<int>(row % 8);
  for (int64_t b = 0; b < kb; ++b, out += 32) {
    const uint8_t* blk = packed + (t * kb + b) * kInterleaved8BlockBytes;
    const float d = LoadF16(blk + 2 * j);
    for (int g = 0; g < 8; ++g) {
      for (int i = 0; i < 4; ++i) {
        out[4 * g + i] = static_cast<float>(static_cast<int8_t>(blk[16 + 32 * g + 4 * j + i])) * d;
      }
    }
  }
}

// The integer products of one instruction set (see Tile above):
//   Start(sum)            an x block's accumulator before its products, given its quant sum;
//   Weight(w), Abs(w)     a loaded weight group as the products take it (Abs: AVX2 only);
//   Dot(acc, wq, wa, x4)  acc + per-lane products of the group with x's 4 broadcast quants.
struct Interleaved8Avx2 {
  static constexpr int kMaxRows = 4;
  static constexpr int kMaxTiles = 1;
  static __m256i Start(int32_t /*sum*/) { return _mm256_setzero_si256(); }
  static __m256i Weight(__m256i w) { return w; }
  static __m256i Abs(__m256i w) { return _mm256_sign_epi8(w, w); }
  static __m256i Dot(__m256i acc, __m256i wq, __m256i wa, __m256i x4) {
    return _mm256_add_epi32(acc, DotU8S8(wa, _mm256_sign_epi8(x4, wq)));
  }
};

struct Interleaved8Vnni {
  static constexpr int kMaxRows = 4;
  static constexpr int kMaxTiles = 2;
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i Start(int32_t sum) {
    return _mm256_set1_epi32(-128 * sum);
  }
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i Weight(__m256i w) {
    return _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i Abs(__m256i w) {
    return w;  // unused
  }
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i Dot(__m256i acc,
                                                                             __m256i wq,
                                                                             __m256i /*wa*/,
                                                                             __m256i x4) {
    return _mm256_dpbusd_epi32(acc, wq, x4);
  }
};

// y[i * ldy + j] = dot(x row i, w row j) for i < R, j < nr (<= 8T): the tile of formats.h's
// Interleaved8TileFn with mr = R and tiles = T.
template <class P, class Adder, int R, int T>
[[gnu::always_inline]] inline void Interleaved8Body(const uint8_t* w, int64_t tile_bytes,
                                                    const Q8Block* x, const int32_t* sums,
                                                    int64_t x_stride, int64_t kb,
                                                    typename Adder::Out* y, int64_t ldy, int nr,
                                                    int64_t granule) {
  // One accumulator (decode's lone row, one tile) adds through Adder::Lone (block_sums.h).
  using A = std::conditional_t<R * T == 1, typename Adder::Lone, Adder>;
  typename A::Acc acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = A::Zero();
  }
  int64_t in_granule = 0;
  // A lone row's products in two chains (even and odd groups), so they do not wait on each
  // other; taller tiles have one chain per row.
  constexpr int C = R == 1 ? 2 : 1;
  for (int64_t b = 0; b < kb; ++b) {
    const uint8_t* blk[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) blk[t] = w + t * tile_bytes + b * kInterleaved8BlockBytes;
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      // Rows of x that sweep a run many times (batches) prefetch the same block of the next run
      // (runs follow in memory) into L1, so it arrives while this run computes; a lone row,
      // which streams each weight once, prefetches kDecodePrefetchBytes ahead, non-temporal.
#pragma GCC unroll 8
      for (int line = 0; line < kInterleaved8BlockBytes; line += 64) {
        if constexpr (R == 1) {
          _mm_prefetch(reinterpret_cast<const char*>(blk[t]) + kDecodePrefetchBytes + line,
                       _MM_HINT_NTA);
        } else {
          _mm_prefetch(reinterpret_cast<const char*>(blk[t] + T * tile_bytes) + line, _MM_HINT_T0);
        }
      }
    }
    const Q8Block* xb[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) xb[r] = x + r * x_stride + b;
    __m256i isum[R][T][C];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i start = P::Start(sums[r * x_stride + b]);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        isum[r][t][0] = start;
        if constexpr (C == 2) isum[r][t][1] = _mm256_setzero_si256();
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m256i wq[T], wa[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i raw =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[t] + 16 + 32 * g));
        wq[t] = P::Weight(raw);
        wa[t] = P::Abs(raw);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256i x4 = Broadcast4(reinterpret_cast<const uint8_t*>(xb[r]->q) + 4 * g);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          isum[r][t][g % C] = P::Dot(isum[r][t][g % C], wq[t], wa[t], x4);
        }
      }
    }
    __m256 dw[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      dw[t] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[t])));
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 dx = _mm256_set1_ps(xb[r]->d);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        __m256i total = isum[r][t][0];
        if constexpr (C == 2) total = _mm256_add_epi32(total, isum[r][t][1]);
        A::Add(acc[r][t], total, dw[t], dx, dx, dx, /*offset=*/false);
      }
    }
    if constexpr (A::kGranules) {
      if (++in_granule == granule) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) A::Flush(acc[r][t]);
        }
        in_granule = 0;
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      typename A::Out* out = y + r * ldy + 8 * t;
      if (8 * t + 8 <= nr) {
        A::Store(acc[r][t], out);
      } else if (8 * t < nr) {
        typename A::Out part[8];
        A::Store(acc[r][t], part);
        for (int j = 0; j < nr - 8 * t; ++j) out[j] = part[j];
      }
    }
  }
}

// The Interleaved8 (formats.h) of Q8_0: each instruction set's tile dispatches (mr, tiles) to
// its instantiation, for each way of adding (block_sums.h).
struct Interleaved8Q8_0 {
  template <class A, int R, int T>
  static void Avx2(const uint8_t* w, int64_t tile_bytes, const Q8Block* x, const int32_t* sums,
                   int64_t x_stride, int64_t kb, typename A::Out* y, int64_t ldy, int nr,
                   int64_t granule) {
    Interleaved8Body<Interleaved8Avx2, A, R, T>(w, tile_bytes, x, sums, x_stride, kb, y, ldy, nr,
                                                granule);
  }
  template <class A, int R, int T>
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static void Vnni(
      const uint8_t* w, int64_t tile_bytes, const Q8Block* x, const int32_t* sums, int64_t x_stride,
      int64_t kb, typename A::Out* y, int64_t ldy, int nr, int64_t granule) {
    Interleaved8Body<Interleaved8Vnni, A, R, T>(w, tile_bytes, x, sums, x_stride, kb, y, ldy, nr,
                                                granule);
  }
  template <class A>
  using Fn = void (*)(const uint8_t*, int64_t, const Q8Block*, const int32_t*, int64_t, int64_t,
                      typename A::Out*, int64_t, int, int64_t);
  template <class A>
  static constexpr Fn<A> kAvx2[Interleaved8Avx2::kMaxRows][Interleaved8Avx2::kMaxTiles] = {
      {Avx2<A, 1, 1>}, {Avx2<A, 2, 1>}, {Avx2<A, 3, 1>}, {Avx2<A, 4, 1>}};
  template <class A>
  static constexpr Fn<A> kVnni[Interleaved8Vnni::kMaxRows][Interleaved8Vnni::kMaxTiles] = {
      {Vnni<A, 1, 1>, Vnni<A, 1, 2>},
      {Vnni<A, 2, 1>, Vnni<A, 2, 2>},
      {Vnni<A, 3, 1>, Vnni<A, 3, 2>},
      {Vnni<A, 4, 1>, Vnni<A, 4, 2>}};
  template <class A>
  static void TileAvx2(const uint8_t* w, int64_t tile_bytes, int tiles, const Q8Block* x,
                       const int32_t* sums, int64_t x_stride, int mr, int64_t kb,
                       typename A::Out* y, int64_t ldy, int nr, int64_t granule) {
    kAvx2<A>[mr - 1][tiles - 1](w, tile_bytes, x, sums, x_stride, kb, y, ldy, nr, granule);
  }
  template <class A>
  static void TileVnni(const uint8_t* w, int64_t tile_bytes, int tiles, const Q8Block* x,
                       const int32_t* sums, int64_t x_stride, int mr, int64_t kb,
                       typename A::Out* y, int64_t ldy, int nr, int64_t granule) {
    kVnni<A>[mr - 1][tiles - 1](w, tile_bytes, x, sums, x_stride, kb, y, ldy, nr, granule);
  }
  static constexpr Interleaved8 kLayout = {
      .pack = PackInterleaved8Q8_0,
      .dequantize_row = DequantizeInterleaved8Q8_0Row,
      .isa = {{TileAvx2<FloatBlocks>, TileAvx2<FixedBlocks>, Interleaved8Avx2::kMaxRows,
               Interleaved8Avx2::kMaxTiles},
              {TileVnni<FloatBlocks>, TileVnni<FixedBlocks>, Interleaved8Vnni::kMaxRows,
               Interleaved8Vnni::kMaxTiles}}};
};

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_INTERLEAVED8_H_
