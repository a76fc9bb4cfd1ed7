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
//                float chain from 0, on activation scales times 2^32 (QuantMatmulFixed scales
//                them, so the chain is in units of 2^-32),
//                  s_G = FloatBlocks' chain over G's blocks = v_G * 2^32
//                y = sum over G of Fixed(v_G) (int64), in any order.
// A tile calls Add per block and Flush after each granule's last block (FloatBlocks: a no-op);
// a tile of one accumulator adds through A::Lone and Rows8 through A::Rows, the same sums in
// other forms (see FixedLoneBlocks, FixedRunBlocks).
// Either way each output's float operations are the same on every tile, thread split,
// instruction set and batch, so both stay batch invariant; FixedBlocks' sums are in addition
// split invariant (any block-aligned slices of k add up to the whole).
#ifndef TPSERVE_KERNELS_CPU_QUANT_BLOCK_SUMS_H_
#define TPSERVE_KERNELS_CPU_QUANT_BLOCK_SUMS_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>

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
  using Lone = FloatBlocks;
  using Rows = FloatBlocks;
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
  [[gnu::always_inline]] static void Store(Acc& a, float* out) { _mm256_storeu_ps(out, a.v); }
};

// The conversion of a granule waits on the end of the block's longest chain (the scales' gather,
// then the chain's fmas), and its operations wait with it in the scheduler: on a tile of one
// accumulator, which has little else to issue, that was most of the path's cost. So
// FixedBlocks converts at once, through doubles (AddFixed8: for ColsN and Interleaved8, whose
// many accumulators leave no registers spare); FixedRunBlocks, for Rows8 (A::Rows: 4
// accumulators), converts at once into int32 parts (AddFixedParts8: fewer operations, 3-5%
// off Rows8's exact matmul), widened to int64 once a run; and FixedLoneBlocks, for the tiles
// of one (A::Lone), keeps a run's granule chains in a buffer and converts them together, every
// input long ready. The bits are the same.
struct FixedLoneBlocks;
struct FixedRunBlocks;

// What the fixed accumulators share: their output, their tiles' other forms, a block into
// the granule's chain (acc.part), and the 8 int64 sums out.
struct FixedChain {
  using Out = int64_t;
  using Lone = FixedLoneBlocks;
  using Rows = FixedRunBlocks;
  static constexpr bool kGranules = true;
  template <class Acc>
  [[gnu::always_inline]] static void Add(Acc& acc, __m256i isum, __m256 dw, __m256 dx, __m256 mw,
                                         __m256 dsx, bool offset) {
    acc.part = BlockStep(acc.part, isum, dw, dx, mw, dsx, offset);
  }
  [[gnu::always_inline]] static void StoreFixed8(__m256i lo, __m256i hi, int64_t* out) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4), hi);
  }
};

struct FixedBlocks : FixedChain {
  struct Acc {
    __m256 part;     // the granule's chain so far (units of 2^-32)
    __m256i lo, hi;  // the fixed sums of the granules before: outputs 0..3, 4..7
  };
  [[gnu::always_inline]] static Acc Zero() {
    return {_mm256_setzero_ps(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  }
  [[gnu::always_inline]] static void Flush(Acc& acc) {
    AddFixed8(acc.part, &acc.lo, &acc.hi);
    acc.part = _mm256_setzero_ps();
  }
  // After the last granule's Flush.
  [[gnu::always_inline]] static void Store(Acc& acc, int64_t* out) {
    StoreFixed8(acc.lo, acc.hi, out);
  }
};

struct FixedRunBlocks : FixedChain {
  struct Acc {
    __m256 part;                  // the granule's chain so far (units of 2^-32)
    __m256i a, b;                 // the int32 parts (fixed_sum.h) of the run's granules
    int run;                      // granules in a and b
    alignas(32) int64_t sums[8];  // the int64 sums of the runs before (touched once a run)
  };
  [[gnu::always_inline]] static Acc Zero() {
    Acc acc;
    acc.part = _mm256_setzero_ps();
    acc.a = acc.b = _mm256_setzero_si256();
    acc.run = 0;
    _mm256_store_si256(reinterpret_cast<__m256i*>(acc.sums), _mm256_setzero_si256());
    _mm256_store_si256(reinterpret_cast<__m256i*>(acc.sums + 4), _mm256_setzero_si256());
    return acc;
  }
  [[gnu::always_inline]] static void Flush(Acc& acc) {
    AddFixedParts8(acc.part, &acc.a, &acc.b);
    acc.part = _mm256_setzero_ps();
    if (++acc.run == kFixedRun) Widen(acc);
  }
  // After the last granule's Flush.
  [[gnu::always_inline]] static void Store(Acc& acc, int64_t* out) {
    Widen(acc);
    std::memcpy(out, acc.sums, sizeof(acc.sums));
  }

 private:
  [[gnu::always_inline]] static void Widen(Acc& acc) {
    __m256i lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc.sums));
    __m256i hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc.sums + 4));
    WidenFixedParts8(acc.a, acc.b, &lo, &hi);
    _mm256_store_si256(reinterpret_cast<__m256i*>(acc.sums), lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(acc.sums + 4), hi);
    acc.a = acc.b = _mm256_setzero_si256();
    acc.run = 0;
  }
};

struct FixedLoneBlocks : FixedChain {
  struct Acc {
    __m256 part;     // the granule's chain so far (units of 2^-32)
    __m256i lo, hi;  // the int64 sums of the runs before: outputs 0..3, 4..7
    int run;         // granule chains held in `chains`
    alignas(32) float chains[kFixedRun][8];
  };
  [[gnu::always_inline]] static Acc Zero() {
    Acc acc;
    acc.part = _mm256_setzero_ps();
    acc.lo = acc.hi = _mm256_setzero_si256();
    acc.run = 0;
    return acc;
  }
  [[gnu::always_inline]] static void Flush(Acc& acc) {
    _mm256_store_ps(acc.chains[acc.run], acc.part);
    acc.part = _mm256_setzero_ps();
    if (++acc.run == kFixedRun) Convert(acc);
  }
  // After the last granule's Flush.
  [[gnu::always_inline]] static void Store(Acc& acc, int64_t* out) {
    Convert(acc);
    StoreFixed8(acc.lo, acc.hi, out);
  }

 private:
  [[gnu::always_inline]] static void Convert(Acc& acc) {
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    for (int i = 0; i < acc.run; ++i) AddFixedParts8(_mm256_load_ps(acc.chains[i]), &a, &b);
    WidenFixedParts8(a, b, &acc.lo, &acc.hi);
    acc.run = 0;
  }
};

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_BLOCK_SUMS_H_
