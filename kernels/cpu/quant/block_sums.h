// File: kernels/cpu/quant/block_sums.h
//
// How an integer tile (tile32.h, interleaved8.h) adds up each output's block contributions, 8
// outputs (one vector lane each) at a time. The tiles are templates on one of these:
//   FloatBlocks  QuantMatmul's float chain: per block b, in order,
//                  acc = fma(float(isum_b), d_w * d_x, acc)
//                  acc = fma(m_w, ds_x, acc)                       (formats with an offset)
//                y = acc (f32);
//   FixedBlocks  QuantMatmulFixed's exact sums (fixed_sum.h): per granule G of `granule`
//                consecutive blocks (aligned to multiples of `granule` from block 0), its own
//                float chain from 0,
//                  v_G = FloatBlocks' chain over G's blocks
//                y = sum over G of Fixed(v_G) (int64), in any order.
// A tile calls Add per block and Flush after each granule's last block (FloatBlocks: a no-op).
// Either way each output's float operations are the same on every tile, thread split,
// instruction set and batch, so both stay batch invariant; FixedBlocks' sums are in addition
// split invariant (any block-aligned slices of k add up to the whole).
#ifndef TPSERVE_KERNELS_CPU_QUANT_BLOCK_SUMS_H_
#define TPSERVE_KERNELS_CPU_QUANT_BLOCK_SUMS_H_

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/quant/fixed_sum.h"

namespace tpserve::kernels::cpu {

// One block's float step on 8 outputs from acc (see above).
[[gnu::always_inline]] inline __m256 BlockStep(__m256 acc, __m256i isum, __m256 dw, __m256 dx,
                                               __m256 mw, __m256 dsx, bool offset) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx), acc);
  if (offset) acc = _mm256_fmadd_ps(mw, dsx, acc);
  return acc;
}

struct FloatBlocks {
  using Out = float;
  static constexpr bool kGranules = false;
  struct Acc {
    __m256 v;
  };
  [[gnu::always_inline]] static Acc Zero() { return {_mm256_setzero_ps()}; }
  [[gnu::always_inline]] static void Add(Acc& a, __m256i isum, __m256 dw, __m256 dx, __m256 mw,
                                         __m256 dsx, bool offset) {
    a.v = BlockStep(a.v, isum, dw, dx, mw, dsx, offset);
  }
  [[gnu::always_inline]] static void Flush(Acc& /*a*/) {}
  // out[0..7] = the 8 outputs.
  [[gnu::always_inline]] static void Store(const Acc& a, float* out) { _mm256_storeu_ps(out, a.v); }
};

struct FixedBlocks {
  using Out = int64_t;
  static constexpr bool kGranules = true;
  struct Acc {
    __m256 part;     // the granule's float chain so far
    __m256i lo, hi;  // the fixed sums of the granules before: outputs 0..3, 4..7
  };
  [[gnu::always_inline]] static Acc Zero() {
    return {_mm256_setzero_ps(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  }
  [[gnu::always_inline]] static void Add(Acc& a, __m256i isum, __m256 dw, __m256 dx, __m256 mw,
                                         __m256 dsx, bool offset) {
    a.part = BlockStep(a.part, isum, dw, dx, mw, dsx, offset);
  }
  [[gnu::always_inline]] static void Flush(Acc& a) {
    AddFixed8(a.part, &a.lo, &a.hi);
    a.part = _mm256_setzero_ps();
  }
  // After the last granule's Flush.
  [[gnu::always_inline]] static void Store(const Acc& a, int64_t* out) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), a.lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4), a.hi);
  }
};

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_BLOCK_SUMS_H_
