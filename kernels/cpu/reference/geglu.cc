#include "kernels/cpu/reference/geglu.h"

#include <cmath>
#include <numbers>

namespace tpserve::kernels::cpu::reference {

void GeGlu(const float* gate, const float* up, float* out, int64_t m, int64_t f) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t i = 0; i < m * f; ++i) {
    const double g = gate[i];
    // 1 + tanh(t) = 2 / (1 + e^-2t): the same value, without the cancellation of 1 + tanh(t)
    // for t below about -10, where it would lose every digit even in double.
    const double t = c * (g + 0.044715 * g * g * g);
    out[i] = static_cast<float>(0.5 * g * (2.0 / (1.0 + std::exp(-2.0 * t))) * up[i]);
  }
}

}  // namespace tpserve::kernels::cpu::reference
