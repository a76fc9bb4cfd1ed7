#include "kernels/cpu/reference/add.h"

namespace tpserve::kernels::cpu::reference {

void Add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void SumInOrder(const float* const* parts, int num_parts, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float acc = parts[0][i];
    for (int p = 1; p < num_parts; ++p) acc += parts[p][i];
    out[i] = acc;
  }
}

void Scale(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

}  // namespace tpserve::kernels::cpu::reference
