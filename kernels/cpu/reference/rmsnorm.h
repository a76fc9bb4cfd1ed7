// File: kernels/cpu/reference/rmsnorm.h
//
// Reference for kernels/cpu/rmsnorm.h.
// Plain scalar loops with float64 accumulation: the ground truth the kernel tests compare
// against. Slow by design; stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_REFERENCE_RMSNORM_H_
#define TPSERVE_KERNELS_CPU_REFERENCE_RMSNORM_H_

#include <cstdint>

namespace tpserve::kernels::cpu::reference {

// out[r, i] = x[r, i] / sqrt(mean(x[r, :]²) + eps) * weight[i]; x, out: [m, d], weight: [d].
void RmsNorm(const float* x, const float* weight, float eps, float* out, int64_t m, int64_t d);

}  // namespace tpserve::kernels::cpu::reference

#endif  // TPSERVE_KERNELS_CPU_REFERENCE_RMSNORM_H_
