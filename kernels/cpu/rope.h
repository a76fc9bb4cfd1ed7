// File: kernels/cpu/rope.h
//
// Rotary position embedding (RoPE), applied in place to the query or key heads of a batch of
// tokens with per-token positions. RopeTable owns the inverse frequencies (and optionally a
// cos/sin cache for positions [0, cached_positions)); it is immutable after construction and
// thread-safe. ApplyRope is stateless.
//
// Precision (documented choice): inv_freq, the angle pos * inv_freq and its cos/sin are computed
// in float64 and rounded to float once; the cache holds exactly those floats, so cached and
// uncached positions give identical results. The rotation itself is float with FMA:
//   a' = fma(-b, sin, a * cos), b' = fma(a, sin, b * cos).
// A token's result depends only on its own position and values: batch-invariant.
#ifndef TPSERVE_KERNELS_CPU_ROPE_H_
#define TPSERVE_KERNELS_CPU_ROPE_H_

#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace tpserve::kernels::cpu {

enum class RopeLayout {
  kInterleaved,  // pairs (2i, 2i+1): GGUF / llama.cpp "normal" mode (Llama GGUF files)
  kNeox,         // pairs (i, i + head_dim/2): Hugging Face rotate_half, GPT-NeoX, Qwen2 GGUF
};

enum class RopeScaling {
  kNone,
  kLinear,  // inv_freq / factor (position interpolation)
  kLlama3,  // Llama 3.1 "llama3" rope_scaling: long wavelengths / factor, smooth in between
};

struct RopeParams {
  int64_t head_dim = 64;   // rotary dims = head_dim (even)
  double theta = 10000.0;  // freq_base
  RopeLayout layout = RopeLayout::kInterleaved;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;                             // kLinear, kLlama3
  double low_freq_factor = 1.0;                    // kLlama3
  double high_freq_factor = 4.0;                   // kLlama3
  double original_max_position_embeddings = 8192;  // kLlama3
  int32_t cached_positions = 4096;                 // cos/sin precomputed for [0, this)
};

class RopeTable {
 public:
  explicit RopeTable(const RopeParams& params);

  const RopeParams& params() const { return params_; }
  // inv_freq[i] for rotary pair i: [head_dim / 2], scaling applied.
  const std::vector<double>& inv_freq() const { return inv_freq_; }

  // cos/sin of pos * inv_freq[i], rounded to float: cos, sin: [head_dim / 2].
  void CosSin(int32_t pos, float* cos, float* sin) const;

 private:
  RopeParams params_;
  std::vector<double> inv_freq_;  // [head_dim / 2]
  std::vector<float> cos_;        // [cached_positions, head_dim / 2]
  std::vector<float> sin_;        // [cached_positions, head_dim / 2]
};

// Rotates x in place.
//   x: m rows with row stride `row_stride` elements; each row starts with [n_heads, head_dim]
//      (row_stride = n_heads * head_dim when packed; larger to rotate the q or k part of a fused
//      QKV output [m, (n_heads + 2 * n_kv_heads) * head_dim] in place),
//   pos: [m] position of each row (>= 0).
// pool may be null.
void ApplyRope(const RopeTable& table, float* x, int64_t row_stride, const int32_t* pos, int64_t m,
               int64_t n_heads, ThreadPool* pool = nullptr);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_ROPE_H_
