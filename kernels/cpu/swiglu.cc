#include "kernels/cpu/swiglu.h"

#include <immintrin.h>

#include "kernels/cpu/gated_rows.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {
namespace {

// silu(g) * u = (g / (1 + e^-g)) * u, lane-wise.
struct SiluMul {
  __m256 operator()(__m256 g, __m256 u) const {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
  }
};

}  // namespace

void SwiGlu(const float* gate_up, float* out, int64_t m, int64_t f, ThreadPool* pool) {
  GatedRows(gate_up, gate_up + f, 2 * f, out, m, f, pool, SiluMul{});
}

void SwiGluSplit(const float* gate, const float* up, float* out, int64_t m, int64_t f,
                 ThreadPool* pool) {
  GatedRows(gate, up, f, out, m, f, pool, SiluMul{});
}

}  // namespace tpserve::kernels::cpu
