// File: kernels/cpu/reference/add.h
//
// Reference for kernels/cpu/add.h.
// Plain scalar loops with float64 accumulation: the ground truth the kernel tests compare
// against. Slow by design; stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_REFERENCE_ADD_H_
#define TPSERVE_KERNELS_CPU_REFERENCE_ADD_H_

#include <cstdint>

namespace tpserve::kernels::cpu::reference {

// y[i] += x[i]; [n].
void Add(float* y, const float* x, int64_t n);

// out[i] = parts[0][i] + parts[1][i] + ..., added left to right in float; [n].
void SumInOrder(const float* const* parts, int num_parts, float* out, int64_t n);

// y[i] *= s; [n].
void Scale(float* y, float s, int64_t n);

}  // namespace tpserve::kernels::cpu::reference

#endif  // TPSERVE_KERNELS_CPU_REFERENCE_ADD_H_
