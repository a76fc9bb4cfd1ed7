#include "kernels/cpu/swiglu.h"

#include <immintrin.h>

#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {
namespace {

constexpr int64_t kParallelElements = 1 << 16;

// silu(g) * u = (g / (1 + e^-g)) * u, lane-wise.
inline __m256 SiluMul(__m256 g, __m256 u) {
  const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

// One row: gate, up, out: [f].
void Row(const float* gate, const float* up, float* out, int64_t f) {
  int64_t i = 0;
  for (; i + 8 <= f; i += 8) {
    _mm256_storeu_ps(out + i, SiluMul(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < f) {
    const __m256i mask = TailMask(f - i);
    _mm256_maskstore_ps(
        out + i, mask,
        SiluMul(_mm256_maskload_ps(gate + i, mask), _mm256_maskload_ps(up + i, mask)));
  }
}

// Rows of gate/up with row stride `in_stride`; out with row stride f.
void Rows(const float* gate, const float* up, int64_t in_stride, float* out, int64_t m, int64_t f,
          ThreadPool* pool) {
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      Row(gate + r * in_stride, up + r * in_stride, out + r * f, f);
    }
  };
  if (pool == nullptr || m * f < kParallelElements) {
    run(0, m);
  } else {
    pool->ParallelFor(m, run);
  }
}

}  // namespace

void SwiGlu(const float* gate_up, float* out, int64_t m, int64_t f, ThreadPool* pool) {
  Rows(gate_up, gate_up + f, 2 * f, out, m, f, pool);
}

void SwiGluSplit(const float* gate, const float* up, float* out, int64_t m, int64_t f,
                 ThreadPool* pool) {
  Rows(gate, up, f, out, m, f, pool);
}

}  // namespace tpserve::kernels::cpu
