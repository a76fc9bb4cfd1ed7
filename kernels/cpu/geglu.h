// File: kernels/cpu/geglu.h
//
// GeGLU activation of the Gemma FFN: out = gelu(gate) * up with the tanh approximation of GELU
// (as Gemma and llama.cpp use it):
//   gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) = g / (1 + e^-z),
//   z = 2 sqrt(2/pi) (g + 0.044715 g^3),
// the second form (1 + tanh(t) = 2 / (1 + e^-2t)) needing one Exp of vec_math.h and no
// cancellation at large |g|: g -> -inf gives -0, g -> +inf gives g. AVX2/FMA; stateless,
// thread-safe; elementwise, so batch-invariant.
//
// Layouts as SwiGlu's (swiglu.h): GeGlu takes the fused gate+up product [m, 2f] (gate columns
// first), GeGluSplit separate gate and up.
#ifndef TPSERVE_KERNELS_CPU_GEGLU_H_
#define TPSERVE_KERNELS_CPU_GEGLU_H_

#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace tpserve::kernels::cpu {

// gate_up: [m, 2f]; out: [m, f]. pool may be null.
void GeGlu(const float* gate_up, float* out, int64_t m, int64_t f, ThreadPool* pool = nullptr);

// gate, up, out: [m, f]. out may alias gate or up.
void GeGluSplit(const float* gate, const float* up, float* out, int64_t m, int64_t f,
                ThreadPool* pool = nullptr);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_GEGLU_H_
