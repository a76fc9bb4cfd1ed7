// File: kernels/cpu/reference/attention.h
//
// Reference for kernels/cpu/attention.h: gathers the sequence's K/V from the paged cache
// into contiguous arrays, then plain two-pass softmax attention.
// Plain scalar loops with float64 accumulation: the ground truth the kernel tests compare
// against. Slow by design; stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_REFERENCE_ATTENTION_H_
#define TPSERVE_KERNELS_CPU_REFERENCE_ATTENTION_H_

#include <cstdint>

#include "kernels/cpu/attention.h"

namespace tpserve::kernels::cpu::reference {

// Same contract as PagedAttention (one sequence, window included); q, out: [t, n_heads,
// head_dim].
void PagedAttention(const float* q, int64_t t, int32_t start_pos, const int32_t* block_table,
                    const PagedKvCache& cache, int64_t n_heads, float scale, float* out,
                    int64_t window = 0);

}  // namespace tpserve::kernels::cpu::reference

#endif  // TPSERVE_KERNELS_CPU_REFERENCE_ATTENTION_H_
