// File: kernels/cpu/reference/softmax.h
//
// Reference for kernels/cpu/softmax.h.
// Plain scalar loops with float64 accumulation: the ground truth the kernel tests compare
// against. Slow by design; stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_REFERENCE_SOFTMAX_H_
#define TPSERVE_KERNELS_CPU_REFERENCE_SOFTMAX_H_

#include <cstdint>

namespace tpserve::kernels::cpu::reference {

// Row-wise softmax; x, out: [m, n].
void Softmax(const float* x, float* out, int64_t m, int64_t n);

// Row-wise log-softmax; x, out: [m, n].
void LogSoftmax(const float* x, float* out, int64_t m, int64_t n);

}  // namespace tpserve::kernels::cpu::reference

#endif  // TPSERVE_KERNELS_CPU_REFERENCE_SOFTMAX_H_
