#include "kernels/cpu/reference/softmax.h"

#include <algorithm>
#include <cmath>

namespace tpserve::kernels::cpu::reference {
namespace {

// max and sum(exp(x - max)) of one row x: [n].
void Stats(const float* x, int64_t n, double* mx, double* sum) {
  *mx = x[0];
  for (int64_t i = 1; i < n; ++i) *mx = std::max<double>(*mx, x[i]);
  *sum = 0.0;
  for (int64_t i = 0; i < n; ++i) *sum += std::exp(x[i] - *mx);
}

}  // namespace

void Softmax(const float* x, float* out, int64_t m, int64_t n) {
  for (int64_t r = 0; r < m; ++r) {
    double mx, sum;
    Stats(x + r * n, n, &mx, &sum);
    for (int64_t i = 0; i < n; ++i) {
      out[r * n + i] = static_cast<float>(std::exp(x[r * n + i] - mx) / sum);
    }
  }
}

void LogSoftmax(const float* x, float* out, int64_t m, int64_t n) {
  for (int64_t r = 0; r < m; ++r) {
    double mx, sum;
    Stats(x + r * n, n, &mx, &sum);
    for (int64_t i = 0; i < n; ++i) {
      out[r * n + i] = static_cast<float>(x[r * n + i] - mx - std::log(sum));
    }
  }
}

}  // namespace tpserve::kernels::cpu::reference
