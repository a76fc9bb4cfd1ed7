// File: kernels/cpu/rmsnorm.h
//
// RMSNorm as in Llama: out = x / sqrt(mean(x²) + eps) * weight, row by row, a fused
// residual-add + RMSNorm, and the per-head form of QK-norm (Gemma 3, Qwen3: each head of q and
// k normalised over its head_dim, in place in the fused QKV rows). AVX2/FMA; stateless,
// thread-safe.
//
// Each row's sum of squares is reduced in a fixed order (two 8-lane FMA accumulators over the
// row, masked tail, HorizontalSum), so a row's result never depends on m or on the thread count;
// threads split rows, never a row.
#ifndef TPSERVE_KERNELS_CPU_RMSNORM_H_
#define TPSERVE_KERNELS_CPU_RMSNORM_H_

#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace tpserve::kernels::cpu {

// x: [m, d], weight: [d] (replicated on every rank), out: [m, d]; out may alias x.
// pool may be null.
void RmsNorm(const float* x, const float* weight, float eps, float* out, int64_t m, int64_t d,
             ThreadPool* pool = nullptr);

// residual += x; out = RmsNorm(residual).
//   residual: [m, d] (updated in place), x: [m, d] (e.g. the all-reduced attention output),
//   weight: [d], out: [m, d]. out may alias x, not residual.
void AddRmsNorm(float* residual, const float* x, const float* weight, float eps, float* out,
                int64_t m, int64_t d, ThreadPool* pool = nullptr);

// QK-norm: each of `heads` consecutive heads of head_dim values, starting at x + r * row_stride
// for each row r < m, becomes RmsNorm(head) * weight in place; weight: [head_dim], shared by
// the heads. A head's result is RmsNorm's of that head alone, bit for bit.
void RmsNormHeads(float* x, int64_t row_stride, int64_t heads, int64_t head_dim,
                  const float* weight, float eps, int64_t m, ThreadPool* pool = nullptr);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_RMSNORM_H_
