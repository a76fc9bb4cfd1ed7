// File: kernels/cpu/reference/swiglu.h
//
// Reference for kernels/cpu/swiglu.h.
// Plain scalar loops with float64 accumulation: the ground truth the kernel tests compare
// against. Slow by design; stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_REFERENCE_SWIGLU_H_
#define TPSERVE_KERNELS_CPU_REFERENCE_SWIGLU_H_

#include <cstdint>

namespace tpserve::kernels::cpu::reference {

// out[r, i] = silu(gate[r, i]) * up[r, i]; gate, up, out: [m, f].
void SwiGlu(const float* gate, const float* up, float* out, int64_t m, int64_t f);

}  // namespace tpserve::kernels::cpu::reference

#endif  // TPSERVE_KERNELS_CPU_REFERENCE_SWIGLU_H_
