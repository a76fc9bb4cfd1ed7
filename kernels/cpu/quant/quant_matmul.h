// File: kernels/cpu/quant/quant_matmul.h
//
// y = x · wᵀ with w kept in its file's format (formats.h): f32 activations x [m, k], weights
// w [n, k] as n rows of RowBytes(format, k) bytes, y [m, n] f32. Integer formats quantise x
// per row to Q8Blocks first (q8_activations.h), then run their tile; F16/BF16 run theirs on
// x as is; F32 is MatmulF32. Work is split over output columns (weight rows) across threads,
// never inside one dot product, and each weight tile is read from memory once per column
// block while every row tile of x sweeps it. Batch invariant (see formats.h).
//
// Thread-safety: as MatmulF32 (the pool used by one caller at a time); `scratch` is the
// caller's (one per caller).
#ifndef TPSERVE_KERNELS_CPU_QUANT_QUANT_MATMUL_H_
#define TPSERVE_KERNELS_CPU_QUANT_QUANT_MATMUL_H_

#include <cstdint>
#include <vector>

#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/q8_activations.h"
#include "kernels/cpu/thread_pool.h"

namespace tpserve::kernels::cpu {

// The best instruction set for the integer tiles on this machine (AVX-512 with VNNI, else
// AVX2), checked once.
QuantIsa BestQuantIsa();

// The caller's buffers for QuantMatmul's quantised activations, reused across calls.
struct QuantScratch {
  std::vector<Q8Block> rows;     // [m, k / 32]
  std::vector<Q8Block8> groups;  // [m / 8, k / 32]: rows 8g .. 8g+7 interleaved
  std::vector<int32_t> sums;     // [m, k / 32]: each row block's sum of quants (interleaved8)
};

// y = x · wᵀ.
//   x: [m, k] f32 row-major; k a multiple of the format's block size (and of 32 for the
//      integer formats)
//   w: [n, k] in the format's kernel layout (weight_layout.h: the file's rows, n *
//      RowBytes(format, k) bytes, or Q8_0's interleaved tiles)
//   y: [m, n] f32; must not alias x or w
// scratch holds the quantised activations between calls (resized as needed). pool may be
// null (runs on the calling thread). isa picks the integer tiles (the results are the same
// bit for bit on every instruction set); it must be one this machine runs.
void QuantMatmul(WeightFormat format, const float* x, const uint8_t* w, float* y, int64_t m,
                 int64_t n, int64_t k, ThreadPool* pool, QuantScratch* scratch,
                 QuantIsa isa = BestQuantIsa());

// Row-parallel products that every split of k reproduces bit for bit (fixed_sum.h): k in
// granules of `granule` blocks of 32 values (k / 32 a multiple of it), y[i, j] = sum over the
// granules G of Fixed(v_G(i, j)), v_G the granule's own float chain (block_sums.h's
// FixedBlocks), as int64. So a rank's sums over its slice of k, whole granules, added to the
// other ranks' in any order (an int64 all-reduce), equal the sums of the whole row;
// FixedToFloat turns them into f32. Arguments as QuantMatmul's but y: [m, n] int64. Formats
// with HasFixedSums only (the 32-value integer formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
bool HasFixedSums(WeightFormat format);
void QuantMatmulFixed(WeightFormat format, const float* x, const uint8_t* w, int64_t* y, int64_t m,
                      int64_t n, int64_t k, int64_t granule, ThreadPool* pool,
                      QuantScratch* scratch, QuantIsa isa = BestQuantIsa());
// y[i] = FromFixed(sums[i]), i < count.
void FixedToFloat(const int64_t* sums, int64_t count, float* y);

// Whether this machine runs the kernels (AVX2, FMA and F16C), checked once.
bool CpuSupportsQuantKernels();

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_QUANT_MATMUL_H_
