#include "kernels/cpu/reference/rmsnorm.h"

#include <cmath>

namespace tpserve::kernels::cpu::reference {

void RmsNorm(const float* x, const float* weight, float eps, float* out, int64_t m, int64_t d) {
  for (int64_t r = 0; r < m; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(x[r * d + i]) * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) {
      out[r * d + i] = static_cast<float>(x[r * d + i] * inv * weight[i]);
    }
  }
}

}  // namespace tpserve::kernels::cpu::reference
