#include "kernels/cpu/embedding.h"

#include <cstring>

#include "glog/logging.h"

namespace tpserve::kernels::cpu {

void GatherRows(const float* table, int64_t vocab, const int32_t* ids, int64_t m, int64_t d,
                float* out) {
  for (int64_t i = 0; i < m; ++i) {
    CHECK(ids[i] >= 0 && ids[i] < vocab)
        << "token id " << ids[i] << " outside [0, " << vocab << ")";
    std::memcpy(out + i * d, table + static_cast<int64_t>(ids[i]) * d, d * sizeof(float));
  }
}

}  // namespace tpserve::kernels::cpu
