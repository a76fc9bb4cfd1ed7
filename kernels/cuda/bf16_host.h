// Host-side f32 <-> bf16 conversion for uploads and downloads (round to nearest even, NaN kept
// quiet), bit for bit __float2bfloat16_rn on the device except for NaN payloads (both give a quiet
// NaN, CUDA's is canonical). Plain functions; thread-safe.
#ifndef TPSERVE_KERNELS_CUDA_BF16_HOST_H_
#define TPSERVE_KERNELS_CUDA_BF16_HOST_H_

#include <cstdint>
#include <cstring>

namespace tpserve::cuda {

inline uint16_t FloatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float Bf16BitsToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// out[i] = bf16(in[i]) for i in [0, n).
inline void FloatsToBf16(const float* in, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16Bits(in[i]);
}
inline void Bf16ToFloats(const uint16_t* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16BitsToFloat(in[i]);
}

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_BF16_HOST_H_
