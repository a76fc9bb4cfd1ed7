// File: kernels/cpu/reference/matmul.h
//
// Reference for kernels/cpu/matmul.h.
// Plain scalar loops with float64 accumulation: the ground truth the kernel tests compare
// against. Slow by design; stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_REFERENCE_MATMUL_H_
#define TPSERVE_KERNELS_CPU_REFERENCE_MATMUL_H_

#include <cstdint>

namespace tpserve::kernels::cpu::reference {

// y[i, j] = sum_p x[i, p] * w[j, p]; x: [m, k], w: [n, k], y: [m, n].
void Matmul(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k);

}  // namespace tpserve::kernels::cpu::reference

#endif  // TPSERVE_KERNELS_CPU_REFERENCE_MATMUL_H_
