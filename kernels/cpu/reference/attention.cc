#include "kernels/cpu/reference/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tpserve::kernels::cpu::reference {

void PagedAttention(const float* q, int64_t t, int32_t start_pos, const int32_t* block_table,
                    const PagedKvCache& cache, int64_t n_heads, float scale, float* out,
                    int64_t window) {
  const int64_t hd = cache.head_dim;
  const int64_t n_kv = cache.n_kv_heads;
  const int64_t ctx = start_pos + t;
  // Contiguous copies: k, v: [ctx, n_kv, hd].
  std::vector<float> k(ctx * n_kv * hd), v(ctx * n_kv * hd);
  for (int64_t p = 0; p < ctx; ++p) {
    if (window > 0 && p < start_pos + 1 - window) continue;  // before every token's window
    const int64_t src =
        (static_cast<int64_t>(block_table[p / cache.block_size]) * cache.block_size +
         p % cache.block_size) *
        n_kv * hd;
    std::copy(cache.k + src, cache.k + src + n_kv * hd, k.begin() + p * n_kv * hd);
    std::copy(cache.v + src, cache.v + src + n_kv * hd, v.begin() + p * n_kv * hd);
  }
  std::vector<double> s(ctx);
  for (int64_t i = 0; i < t; ++i) {
    const int64_t len = start_pos + i + 1;
    const int64_t first = window > 0 ? std::max<int64_t>(0, len - window) : 0;
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t kvh = h / (n_heads / n_kv);
      const float* qh = q + (i * n_heads + h) * hd;
      double mx = -INFINITY;
      for (int64_t p = first; p < len; ++p) {
        double dot = 0.0;
        for (int64_t e = 0; e < hd; ++e) {
          dot += static_cast<double>(qh[e]) * k[(p * n_kv + kvh) * hd + e];
        }
        s[p] = dot * scale;
        mx = std::max(mx, s[p]);
      }
      double sum = 0.0;
      for (int64_t p = first; p < len; ++p) {
        s[p] = std::exp(s[p] - mx);
        sum += s[p];
      }
      for (int64_t e = 0; e < hd; ++e) {
        double acc = 0.0;
        for (int64_t p = first; p < len; ++p) acc += s[p] * v[(p * n_kv + kvh) * hd + e];
        out[(i * n_heads + h) * hd + e] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace tpserve::kernels::cpu::reference
