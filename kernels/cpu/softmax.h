// File: kernels/cpu/softmax.h
//
// Row-wise softmax and log-softmax (max-subtracted, vectorised Exp of vec_math.h), for the
// sampler over logits. AVX2/FMA; stateless, thread-safe. Each row is reduced in a fixed order
// on one thread, so a row's result does not depend on m or on the thread count.
#ifndef TPSERVE_KERNELS_CPU_SOFTMAX_H_
#define TPSERVE_KERNELS_CPU_SOFTMAX_H_

#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace tpserve::kernels::cpu {

// out[r, :] = exp(x[r, :] - max_r) / sum(exp(x[r, :] - max_r)).
//   x: [m, n] (e.g. logits [m, vocab]), out: [m, n]; out may alias x. n >= 1.
// A row of all -inf gives NaN (as the maths does); rows with some -inf entries give 0 there.
void Softmax(const float* x, float* out, int64_t m, int64_t n, ThreadPool* pool = nullptr);

// out[r, :] = x[r, :] - max_r - log(sum(exp(x[r, :] - max_r))); shapes as Softmax.
void LogSoftmax(const float* x, float* out, int64_t m, int64_t n, ThreadPool* pool = nullptr);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_SOFTMAX_H_
