#include "kernels/cpu/reference/embedding.h"

namespace tpserve::kernels::cpu::reference {

void GatherRows(const float* table, const int32_t* ids, int64_t m, int64_t d, float* out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t e = 0; e < d; ++e) out[i * d + e] = table[static_cast<int64_t>(ids[i]) * d + e];
  }
}

}  // namespace tpserve::kernels::cpu::reference
