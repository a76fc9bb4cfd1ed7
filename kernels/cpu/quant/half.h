// File: kernels/cpu/quant/half.h
//
// IEEE half and bfloat16 to float, exact. Header-only; thread-safe.
#ifndef TPSERVE_KERNELS_CPU_QUANT_HALF_H_
#define TPSERVE_KERNELS_CPU_QUANT_HALF_H_

#include <bit>
#include <cstdint>

namespace tpserve::kernels::cpu {

// IEEE half -> float, exact for all 65536 inputs: subnormals, infinities, and NaNs with
// their sign and payload (a signalling NaN stays signalling, unlike F16C's vcvtph2ps).
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal mant * 2^-24: normalise so that bit 10 is the implicit one.
    uint32_t e = 127 - 15 + 1;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3FF) << 13);
  }
  return std::bit_cast<float>(bits);
}

// bfloat16 -> float (exact: the top half of the float's bits).
inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_HALF_H_
