// File: kernels/cpu/reference/rope.h
//
// Reference for kernels/cpu/rope.h: recomputes the frequencies from the parameters with its
// own code (scaling formula included) and rotates in float64.
// Plain scalar loops with float64 accumulation: the ground truth the kernel tests compare
// against. Slow by design; stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_REFERENCE_ROPE_H_
#define TPSERVE_KERNELS_CPU_REFERENCE_ROPE_H_

#include <cstdint>

#include "kernels/cpu/rope.h"

namespace tpserve::kernels::cpu::reference {

// Rotates x: [m, n_heads, head_dim] (packed) in place; pos: [m].
void Rope(const RopeParams& params, float* x, const int32_t* pos, int64_t m, int64_t n_heads);

}  // namespace tpserve::kernels::cpu::reference

#endif  // TPSERVE_KERNELS_CPU_REFERENCE_ROPE_H_
