// Per-type dequantisation kernels, one file each (dequantize_<type>.cc): each converts
// n_blocks consecutive blocks at `src` into n_blocks * block_values floats at `dst`.
// Plain pointers, no checks (the callers in dequantize.cc bound them); thread-safe.
// Internal to tpserve_gguf.
#ifndef TPSERVE_SERVER_MODEL_DEQUANTIZE_KERNELS_H_
#define TPSERVE_SERVER_MODEL_DEQUANTIZE_KERNELS_H_

#include <cstdint>
#include <cstring>

#include "server/model/dequantize.h"

namespace tpserve::model::kernels {

using DequantizeFn = void (*)(const uint8_t* src, int64_t n_blocks, float* dst);

void DequantizeF32(const uint8_t* src, int64_t n_blocks, float* dst);
void DequantizeF16(const uint8_t* src, int64_t n_blocks, float* dst);
void DequantizeBF16(const uint8_t* src, int64_t n_blocks, float* dst);
void DequantizeQ4_0(const uint8_t* src, int64_t n_blocks, float* dst);
void DequantizeQ4_1(const uint8_t* src, int64_t n_blocks, float* dst);
void DequantizeQ8_0(const uint8_t* src, int64_t n_blocks, float* dst);
void DequantizeQ4_K(const uint8_t* src, int64_t n_blocks, float* dst);
void DequantizeQ5_K(const uint8_t* src, int64_t n_blocks, float* dst);
void DequantizeQ6_K(const uint8_t* src, int64_t n_blocks, float* dst);

// An unaligned little-endian half at p.
inline float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return F16ToF32(h);
}

// Sub-block j (0..7) scale and min of a Q4_K/Q5_K super-block from its 12 packed bytes
// (ggml's get_scale_min_k4): bytes 0..3 hold scales 0..3 in their low 6 bits, bytes 4..7
// mins 0..3; scales/mins 4..7 take their low 4 bits from bytes 8..11 and their top 2 bits
// from the top bits of bytes 0..3 / 4..7.
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace tpserve::model::kernels

#endif  // TPSERVE_SERVER_MODEL_DEQUANTIZE_KERNELS_H_
