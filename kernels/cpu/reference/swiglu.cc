#include "kernels/cpu/reference/swiglu.h"

#include <cmath>

namespace tpserve::kernels::cpu::reference {

void SwiGlu(const float* gate, const float* up, float* out, int64_t m, int64_t f) {
  for (int64_t i = 0; i < m * f; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

}  // namespace tpserve::kernels::cpu::reference
