// File: kernels/cpu/sum_exp.h
//
// SumExp: the sum of e^(x[i] * scale - offset) over a row, the normaliser of a softmax at
// temperature 1 / scale when `offset` is the row's largest x * scale (every term then at most
// 1, and the sum at least 1). The sampler's log-probabilities: log Z = offset + log SumExp.
// AVX2/FMA: 8 lanes of vec_math's Exp (float, <= 2 ulp), summed in double in a fixed order,
// so the same row gives the same bits whatever else runs. Stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_SUM_EXP_H_
#define TPSERVE_KERNELS_CPU_SUM_EXP_H_

#include <cstdint>

namespace tpserve::kernels::cpu {

// x: [n], n >= 0 (0: the sum is 0).
double SumExp(const float* x, int64_t n, float scale, float offset);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_SUM_EXP_H_
