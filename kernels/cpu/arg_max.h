// File: kernels/cpu/arg_max.h
//
// ArgMax: the index of a row's largest value, the first one where several tie; NaN values
// never win, and a row starting with NaN gives 0 (as the plain loop
// `if (x[i] > x[best]) best = i` does). The greedy sampler's pick over the vocabulary.
// AVX2: the maximum in 8 lanes, then the first index holding it. Stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_ARG_MAX_H_
#define TPSERVE_KERNELS_CPU_ARG_MAX_H_

#include <cstdint>

namespace tpserve::kernels::cpu {

// x: [n], n >= 1.
int64_t ArgMax(const float* x, int64_t n);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_ARG_MAX_H_
