// File: kernels/cpu/swiglu.h
//
// SwiGLU activation of the Llama FFN: out = silu(gate) * up, silu(g) = g / (1 + e^-g), with the
// vectorised Exp of vec_math.h. AVX2/FMA; stateless, thread-safe; elementwise, so
// batch-invariant.
//
// Input layout of SwiGlu (what the fused gate+up matmul produces): the rank's gate rows and up
// rows are stacked into one weight w_gate_up: [2 * f_local, d_model] (gate rows first), so
// MatmulF32 yields gate_up: [m, 2 * f_local] with row r = [gate(r, 0..f) | up(r, 0..f)] —
// concatenated halves, not interleaved pairs.
#ifndef TPSERVE_KERNELS_CPU_SWIGLU_H_
#define TPSERVE_KERNELS_CPU_SWIGLU_H_

#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace tpserve::kernels::cpu {

// gate_up: [m, 2f] as above; out: [m, f]. pool may be null.
void SwiGlu(const float* gate_up, float* out, int64_t m, int64_t f, ThreadPool* pool = nullptr);

// Separate inputs: gate, up, out: [m, f]. out may alias gate or up.
void SwiGluSplit(const float* gate, const float* up, float* out, int64_t m, int64_t f,
                 ThreadPool* pool = nullptr);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_SWIGLU_H_
