// File: kernels/cpu/embedding.h
//
// Embedding lookup: copies table rows selected by token id. Stateless, thread-safe.
#ifndef TPSERVE_KERNELS_CPU_EMBEDDING_H_
#define TPSERVE_KERNELS_CPU_EMBEDDING_H_

#include <cstdint>

namespace tpserve::kernels::cpu {

// out[i, :] = table[ids[i], :].
//   table: [vocab, d] (the full table, or a rank's vocab slice re-based by the caller),
//   ids: [m], each in [0, vocab) (CHECKed: callers validate token ids first), out: [m, d].
void GatherRows(const float* table, int64_t vocab, const int32_t* ids, int64_t m, int64_t d,
                float* out);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_EMBEDDING_H_
