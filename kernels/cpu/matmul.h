// File: kernels/cpu/matmul.h
//
// f32 matrix multiply y = x · wᵀ with w stored row-major as [n, k] (one row per output
// feature, the layout of GGUF / PyTorch Linear weights). AVX2/FMA, register-blocked.
// Stateless; thread-safe as long as the ThreadPool is used by one caller at a time.
//
// Batch invariance: every y[i, j] is accumulated in the same order whatever m, the tiling, the
// tails or the thread count: one 8-lane FMA accumulator over k in steps of 8 (the k % 8 tail
// masked in as the last step), then HorizontalSum (vec_math.h). Work is split over n across
// threads; a reduction is never split. So row i of an m-row call equals an m=1 call on that row
// bit for bit.
#ifndef TPSERVE_KERNELS_CPU_MATMUL_H_
#define TPSERVE_KERNELS_CPU_MATMUL_H_

#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace tpserve::kernels::cpu {

// y = x · wᵀ.
//   x: [m, k] row-major (activations, one row per token)
//   w: [n, k] row-major (under tensor parallelism, the rank's rows: [n_local, k] for a
//      column-parallel weight, [n, k_local] for a row-parallel one)
//   y: [m, n] row-major; must not alias x or w.
// pool may be null (runs on the calling thread).
void MatmulF32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k,
               ThreadPool* pool);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_MATMUL_H_
