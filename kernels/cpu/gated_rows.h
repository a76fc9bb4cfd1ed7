// File: kernels/cpu/gated_rows.h
//
// The row driver of the gated FFN activations (swiglu.h, geglu.h): out = act(gate) * up,
// element by element, 8 lanes at a time with a masked tail, rows split across threads. The
// activation is a functor `__m256 operator()(__m256 gate, __m256 up)`. Header-only; included only
// by the activations' own .cc files (compiled with -mavx2 -mfma). Elementwise, so
// batch-invariant.
#ifndef TPSERVE_KERNELS_CPU_GATED_ROWS_H_
#define TPSERVE_KERNELS_CPU_GATED_ROWS_H_

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {

// Below this many elements one thread does the whole batch.
inline constexpr int64_t kGatedParallelElements = 1 << 16;

// Rows of gate and up with row stride `in_stride`; out: [m, f] (row stride f).
template <class Act>
void GatedRows(const float* gate, const float* up, int64_t in_stride, float* out, int64_t m,
               int64_t f, ThreadPool* pool, Act act) {
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gate + r * in_stride;
      const float* u = up + r * in_stride;
      float* o = out + r * f;
      int64_t i = 0;
      for (; i + 8 <= f; i += 8) {
        _mm256_storeu_ps(o + i, act(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
      }
      if (i < f) {
        const __m256i mask = TailMask(f - i);
        _mm256_maskstore_ps(o + i, mask,
                            act(_mm256_maskload_ps(g + i, mask), _mm256_maskload_ps(u + i, mask)));
      }
    }
  };
  if (pool == nullptr || m * f < kGatedParallelElements) {
    run(0, m);
  } else {
    pool->ParallelFor(m, run);
  }
}

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_GATED_ROWS_H_
