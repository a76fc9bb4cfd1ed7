#include "kernels/cpu/reference/matmul.h"

namespace tpserve::kernels::cpu::reference {

void Matmul(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) s += static_cast<double>(x[i * k + p]) * w[j * k + p];
      y[i * n + j] = static_cast<float>(s);
    }
  }
}

}  // namespace tpserve::kernels::cpu::reference
