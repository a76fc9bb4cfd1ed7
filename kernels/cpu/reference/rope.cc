#include "kernels/cpu/reference/rope.h"

#include <cmath>
#include <numbers>

namespace tpserve::kernels::cpu::reference {

void Rope(const RopeParams& params, float* x, const int32_t* pos, int64_t m, int64_t n_heads) {
  const int64_t d = params.head_dim;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* head = x + (r * n_heads + h) * d;
      for (int64_t i = 0; i < d / 2; ++i) {
        double freq = std::pow(params.theta, -2.0 * static_cast<double>(i) / d);
        if (params.scaling == RopeScaling::kLinear) freq /= params.factor;
        if (params.scaling == RopeScaling::kLlama3) {
          // Llama 3.1: wavelengths above old_ctx / low_freq_factor are divided by factor, below
          // old_ctx / high_freq_factor kept, in between interpolated linearly in 1/wavelen.
          const double wavelen = 2.0 * std::numbers::pi / freq;
          const double ratio = params.original_max_position_embeddings / wavelen;
          if (ratio < params.low_freq_factor) {
            freq /= params.factor;
          } else if (ratio <= params.high_freq_factor) {
            const double smooth = (ratio - params.low_freq_factor) /
                                  (params.high_freq_factor - params.low_freq_factor);
            freq = (1.0 - smooth) * freq / params.factor + smooth * freq;
          }
        }
        const double angle = static_cast<double>(pos[r]) * freq;
        const int64_t a = params.layout == RopeLayout::kNeox ? i : 2 * i;
        const int64_t b = params.layout == RopeLayout::kNeox ? i + d / 2 : 2 * i + 1;
        const double x0 = head[a];
        const double x1 = head[b];
        head[a] = static_cast<float>(x0 * std::cos(angle) - x1 * std::sin(angle));
        head[b] = static_cast<float>(x0 * std::sin(angle) + x1 * std::cos(angle));
      }
    }
  }
}

}  // namespace tpserve::kernels::cpu::reference
