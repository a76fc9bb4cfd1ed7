#include "kernels/cpu/reference/add.h"

namespace tpserve::kernels::cpu::reference {

void Add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void Scale(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

}  // namespace tpserve::kernels::cpu::reference
