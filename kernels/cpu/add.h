// File: kernels/cpu/add.h
//
// Elementwise helpers on flat f32 buffers (residual adds, scaling). AVX2; stateless,
// thread-safe. Elementwise, so trivially batch-invariant.
#ifndef TPSERVE_KERNELS_CPU_ADD_H_
#define TPSERVE_KERNELS_CPU_ADD_H_

#include <cstdint>

namespace tpserve::kernels::cpu {

// y[i] += x[i]; y, x: [n] (e.g. [m * d_model] for a residual). x may alias y.
void Add(float* y, const float* x, int64_t n);

// out[i] = a[i] + b[i]; a, b, out: [n]. out may alias a or b.
void AddTo(const float* a, const float* b, float* out, int64_t n);

// out[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ...: the sum of num_parts >= 1 buffers
// [n] in their order, so every caller that lists the same parts gets the same bits. out may
// alias parts[0].
void SumInOrder(const float* const* parts, int num_parts, float* out, int64_t n);

// y[i] *= s; y: [n].
void Scale(float* y, float s, int64_t n);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_ADD_H_
