// File: kernels/cpu/quant/q8_activations.h
//
// Activations quantised per row to 8 bits, the form the integer weight formats' tiles read:
// each run of 32 values becomes a Q8Block (one scale, 32 signed bytes), as llama.cpp's q8_0 /
// q8_1 do. A row's blocks depend on that row alone, so the quantisation keeps batch
// invariance. Stateless; thread-safe.
#ifndef TPSERVE_KERNELS_CPU_QUANT_Q8_ACTIVATIONS_H_
#define TPSERVE_KERNELS_CPU_QUANT_Q8_ACTIVATIONS_H_

#include <cstdint>

namespace tpserve::kernels::cpu {

// 32 values x[l] ~= d * q[l], d = max|x| / 127 (0 for an all-zero run), q in [-127, 127];
// ds = d * sum(q), for formats whose values carry an offset (Q4_0's -8, Q4_1's and the
// K-quants' mins).
struct Q8Block {
  float d;
  float ds;
  int8_t q[32];
};
static_assert(sizeof(Q8Block) == 40);

// Quantises x: [m, k] f32 (row stride k; k a multiple of 32) into out: [m, k / 32] blocks.
// Rounds to nearest, ties to even.
void QuantizeRowsQ8(const float* x, int64_t m, int64_t k, Q8Block* out);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_Q8_ACTIVATIONS_H_
