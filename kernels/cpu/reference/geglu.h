// File: kernels/cpu/reference/geglu.h
//
// Reference for kernels/cpu/geglu.h: GELU's tanh form in float64 (1 + tanh(t) taken as
// 2 / (1 + e^-2t), which double evaluates without cancellation). Slow by design;
// stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_REFERENCE_GEGLU_H_
#define TPSERVE_KERNELS_CPU_REFERENCE_GEGLU_H_

#include <cstdint>

namespace tpserve::kernels::cpu::reference {

// out[r, i] = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * up[r, i], g = gate[r, i];
// gate, up, out: [m, f].
void GeGlu(const float* gate, const float* up, float* out, int64_t m, int64_t f);

}  // namespace tpserve::kernels::cpu::reference

#endif  // TPSERVE_KERNELS_CPU_REFERENCE_GEGLU_H_
