// File: kernels/cpu/reference/embedding.h
//
// Reference for kernels/cpu/embedding.h.
// Plain scalar loops with float64 accumulation: the ground truth the kernel tests compare
// against. Slow by design; stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_REFERENCE_EMBEDDING_H_
#define TPSERVE_KERNELS_CPU_REFERENCE_EMBEDDING_H_

#include <cstdint>

namespace tpserve::kernels::cpu::reference {

// out[i, :] = table[ids[i], :]; table: [vocab, d], ids: [m], out: [m, d].
void GatherRows(const float* table, const int32_t* ids, int64_t m, int64_t d, float* out);

}  // namespace tpserve::kernels::cpu::reference

#endif  // TPSERVE_KERNELS_CPU_REFERENCE_EMBEDDING_H_
