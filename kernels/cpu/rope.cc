#include "kernels/cpu/rope.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "glog/logging.h"

namespace tpserve::kernels::cpu {
namespace {

constexpr int64_t kParallelElements = 1 << 14;

// Llama 3.1 frequency scaling (transformers' _compute_llama3_parameters).
double Llama3InvFreq(double inv_freq, const RopeParams& p) {
  const double low_freq_wavelen = p.original_max_position_embeddings / p.low_freq_factor;
  const double high_freq_wavelen = p.original_max_position_embeddings / p.high_freq_factor;
  const double wavelen = 2.0 * std::numbers::pi / inv_freq;
  if (wavelen < high_freq_wavelen) return inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / p.factor;
  const double smooth = (p.original_max_position_embeddings / wavelen - p.low_freq_factor) /
                        (p.high_freq_factor - p.low_freq_factor);
  return (1.0 - smooth) * inv_freq / p.factor + smooth * inv_freq;
}

// a' = fma(-b, s, a * c), b' = fma(a, s, b * c); scalar form of the vector code below.
inline void RotatePair(float* a, float* b, float c, float s) {
  const float x0 = *a;
  const float x1 = *b;
  *a = std::fma(-x1, s, x0 * c);
  *b = std::fma(x0, s, x1 * c);
}

// One head, neox layout: pairs (i, i + half). head: [head_dim]; cos, sin: [half].
void RotateNeox(float* head, const float* cos, const float* sin, int64_t half) {
  int64_t i = 0;
  for (; i + 8 <= half; i += 8) {
    const __m256 a = _mm256_loadu_ps(head + i);
    const __m256 b = _mm256_loadu_ps(head + half + i);
    const __m256 c = _mm256_loadu_ps(cos + i);
    const __m256 s = _mm256_loadu_ps(sin + i);
    const __m256 neg_b = _mm256_sub_ps(_mm256_setzero_ps(), b);
    _mm256_storeu_ps(head + i, _mm256_fmadd_ps(neg_b, s, _mm256_mul_ps(a, c)));
    _mm256_storeu_ps(head + half + i, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
  }
  for (; i < half; ++i) RotatePair(head + i, head + half + i, cos[i], sin[i]);
}

// One head, interleaved layout: pairs (2i, 2i+1). head: [2 * half]; cos2, sin2: [2 * half] with
// cos2[2i] = cos2[2i+1] = cos[i], sin2[2i] = -sin[i], sin2[2i+1] = sin[i].
void RotateInterleaved(float* head, const float* cos2, const float* sin2, const float* cos,
                       const float* sin, int64_t half) {
  const int64_t d = 2 * half;
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const __m256 x = _mm256_loadu_ps(head + i);
    const __m256 swapped = _mm256_permute_ps(x, 0xB1);  // (x1, x0, x3, x2, ...)
    // Lane 2j: fma(-x1, s, x0 * c); lane 2j+1: fma(x0, s, x1 * c).
    const __m256 r = _mm256_fmadd_ps(swapped, _mm256_loadu_ps(sin2 + i),
                                     _mm256_mul_ps(x, _mm256_loadu_ps(cos2 + i)));
    _mm256_storeu_ps(head + i, r);
  }
  for (; i < d; i += 2) RotatePair(head + i, head + i + 1, cos[i / 2], sin[i / 2]);
}

}  // namespace

RopeTable::RopeTable(const RopeParams& params) : params_(params) {
  CHECK(params.head_dim > 0 && params.head_dim % 2 == 0) << "head_dim " << params.head_dim;
  CHECK_GT(params.theta, 0.0);
  CHECK_GE(params.cached_positions, 0);
  const int64_t half = params.head_dim / 2;
  inv_freq_.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(params.theta, static_cast<double>(2 * i) / params.head_dim);
    switch (params.scaling) {
      case RopeScaling::kNone:
        break;
      case RopeScaling::kLinear:
        CHECK_GT(params.factor, 0.0);
        f /= params.factor;
        break;
      case RopeScaling::kLlama3:
        CHECK_GT(params.factor, 0.0);
        CHECK_GT(params.high_freq_factor, params.low_freq_factor);
        f = Llama3InvFreq(f, params);
        break;
    }
    inv_freq_[i] = f;
  }
  cos_.resize(static_cast<size_t>(params.cached_positions) * half);
  sin_.resize(cos_.size());
  for (int32_t p = 0; p < params.cached_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq_[i];
      cos_[p * half + i] = static_cast<float>(std::cos(angle));
      sin_[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void RopeTable::CosSin(int32_t pos, float* cos, float* sin) const {
  const int64_t half = params_.head_dim / 2;
  if (pos >= 0 && pos < params_.cached_positions) {
    std::copy(cos_.begin() + pos * half, cos_.begin() + (pos + 1) * half, cos);
    std::copy(sin_.begin() + pos * half, sin_.begin() + (pos + 1) * half, sin);
    return;
  }
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq_[i];
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
}

void ApplyRope(const RopeTable& table, float* x, int64_t row_stride, const int32_t* pos, int64_t m,
               int64_t n_heads, ThreadPool* pool) {
  const int64_t head_dim = table.params().head_dim;
  const int64_t half = head_dim / 2;
  CHECK_GE(row_stride, n_heads * head_dim);
  const bool neox = table.params().layout == RopeLayout::kNeox;
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(4 * head_dim);
    float* cos = scratch.data();              // [half]
    float* sin = cos + half;                  // [half]
    float* cos2 = scratch.data() + head_dim;  // [head_dim], interleaved layout only
    float* sin2 = cos2 + head_dim;            // [head_dim]
    for (int64_t r = begin; r < end; ++r) {
      CHECK_GE(pos[r], 0);
      table.CosSin(pos[r], cos, sin);
      if (!neox) {
        for (int64_t i = 0; i < half; ++i) {
          cos2[2 * i] = cos2[2 * i + 1] = cos[i];
          sin2[2 * i] = -sin[i];
          sin2[2 * i + 1] = sin[i];
        }
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* head = x + r * row_stride + h * head_dim;  // [head_dim]
        if (neox) {
          RotateNeox(head, cos, sin, half);
        } else {
          RotateInterleaved(head, cos2, sin2, cos, sin, half);
        }
      }
    }
  };
  if (pool == nullptr || m * n_heads * head_dim < kParallelElements) {
    run(0, m);
  } else {
    pool->ParallelFor(m, run);
  }
}

}  // namespace tpserve::kernels::cpu
