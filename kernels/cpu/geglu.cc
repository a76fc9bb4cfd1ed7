#include "kernels/cpu/geglu.h"

#include <immintrin.h>

#include "kernels/cpu/gated_rows.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {
namespace {

// gelu_tanh(g) * u = g / (1 + e^-z) * u, z = 2 sqrt(2/pi) g (1 + 0.044715 g^2), lane-wise.
struct GeluMul {
  __m256 operator()(__m256 g, __m256 u) const {
    const __m256 g2 = _mm256_mul_ps(g, g);
    const __m256 inner =
        _mm256_mul_ps(g, _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g2, _mm256_set1_ps(1.0f)));
    const __m256 minus_z = _mm256_mul_ps(_mm256_set1_ps(-1.5957691216057308f), inner);
    const __m256 e = Exp(minus_z);
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
  }
};

}  // namespace

void GeGlu(const float* gate_up, float* out, int64_t m, int64_t f, ThreadPool* pool) {
  GatedRows(gate_up, gate_up + f, 2 * f, out, m, f, pool, GeluMul{});
}

void GeGluSplit(const float* gate, const float* up, float* out, int64_t m, int64_t f,
                ThreadPool* pool) {
  GatedRows(gate, up, f, out, m, f, pool, GeluMul{});
}

}  // namespace tpserve::kernels::cpu
