// F32, F16 and BF16 "blocks" (one value each): dequantisation, and the tiles of F16 and BF16
// weights against f32 activations (F32 weights go through kernels/cpu/matmul.h). Per output:
// one 8-lane FMA accumulator over k in steps of 8 (the k % 8 tail zero-padded as the last
// step), then HorizontalSum: the order of MatmulF32.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/quant/block_dot.h"
#include "kernels/cpu/quant/formats.h"

namespace tpserve::kernels::cpu {
namespace {

void DequantizeF32(const uint8_t* src, int64_t n_blocks, float* dst) {
  std::memcpy(dst, src, static_cast<size_t>(n_blocks) * sizeof(float));
}

// F16C converts 8 halves per instruction and is exact except that it quiets signalling
// NaNs; a group holding any NaN is redone with the exact scalar conversion.
void DequantizeF16(const uint8_t* src, int64_t n_blocks, float* dst) {
  int64_t i = 0;
  const __m128i abs_mask = _mm_set1_epi16(0x7FFF);
  const __m128i inf = _mm_set1_epi16(0x7C00);
  for (; i + 8 <= n_blocks; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, abs_mask), inf);
    if (_mm_movemask_epi8(nan) == 0) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    } else {
      for (int64_t j = i; j < i + 8; ++j) dst[j] = LoadF16(src + 2 * j);
    }
  }
  for (; i < n_blocks; ++i) dst[i] = LoadF16(src + 2 * i);
}

void DequantizeBF16(const uint8_t* src, int64_t n_blocks, float* dst) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof(h));
    dst[i] = Bf16ToF32(h);
  }
}

// 8 halves at p -> 8 floats (the first `count` of them; the rest zero).
struct F16Values {
  static __m256 Load8(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};
struct Bf16Values {
  static __m256 Load8(const uint8_t* p) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
};

template <class Values>
__m256 LoadTail(const uint8_t* p, int64_t count) {
  uint8_t tmp[16] = {};
  std::memcpy(tmp, p, static_cast<size_t>(count) * 2);
  return Values::Load8(tmp);
}

template <class Values, int MR, int NR>
void HalfTile(const uint8_t* w, int64_t w_stride, const float* x, int64_t x_stride, int64_t k,
              float* y, int64_t ldy) {
  __m256 acc[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 8 <= k; p += 8) {
    __m256 wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) wv[j] = Values::Load8(w + j * w_stride + 2 * p);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * x_stride + p);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (p < k) {
    const __m256i mask = TailMask(k - p);
    __m256 wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) wv[j] = LoadTail<Values>(w + j * w_stride + 2 * p, k - p);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_maskload_ps(x + i * x_stride + p, mask);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = HorizontalSum(acc[i][j]);
  }
}

template <class Values>
struct HalfTileOf {
  template <int MR, int NR>
  struct At {
    static void Run(const uint8_t* w, int64_t w_stride, const float* x, int64_t x_stride, int64_t k,
                    float* y, int64_t ldy) {
      HalfTile<Values, MR, NR>(w, w_stride, x, x_stride, k, y, ldy);
    }
  };
  static void Run(const uint8_t* w, int64_t w_stride, int nr, const float* x, int64_t x_stride,
                  int mr, int64_t k, float* y, int64_t ldy) {
    DispatchTile<At>(mr, nr, w, w_stride, x, x_stride, k, y, ldy);
  }
};

}  // namespace

const FormatKernels kF32Kernels = {.format = WeightFormat::kF32,
                                   .name = "F32",
                                   .block_values = 1,
                                   .block_bytes = 4,
                                   .dequantize = DequantizeF32,
                                   .tiles32 = nullptr,
                                   .quant_tile = nullptr,
                                   .float_tile = nullptr,
                                   .interleaved8 = nullptr};
const FormatKernels kF16Kernels = {.format = WeightFormat::kF16,
                                   .name = "F16",
                                   .block_values = 1,
                                   .block_bytes = 2,
                                   .dequantize = DequantizeF16,
                                   .tiles32 = nullptr,
                                   .quant_tile = nullptr,
                                   .float_tile = HalfTileOf<F16Values>::Run,
                                   .interleaved8 = nullptr};
const FormatKernels kBF16Kernels = {.format = WeightFormat::kBF16,
                                    .name = "BF16",
                                    .block_values = 1,
                                    .block_bytes = 2,
                                    .dequantize = DequantizeBF16,
                                    .tiles32 = nullptr,
                                    .quant_tile = nullptr,
                                    .float_tile = HalfTileOf<Bf16Values>::Run,
                                    .interleaved8 = nullptr};

}  // namespace tpserve::kernels::cpu
