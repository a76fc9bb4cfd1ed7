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

// y = x · wᵀ.
//   x: [m, k] f32 row-major; k a multiple of the format's block size (and of 32 for the
//      integer formats)
//   w: [n, RowBytes(format, k)] bytes
//   y: [m, n] f32; must not alias x or w
// scratch holds the quantised activations between calls (resized as needed). pool may be
// null (runs on the calling thread).
void QuantMatmul(WeightFormat format, const float* x, const uint8_t* w, float* y, int64_t m,
                 int64_t n, int64_t k, ThreadPool* pool, std::vector<Q8Block>* scratch);

// Whether this machine runs the kernels (AVX2, FMA and F16C), checked once.
bool CpuSupportsQuantKernels();

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_QUANT_MATMUL_H_
