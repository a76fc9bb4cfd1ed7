// File: kernels/cpu/test_util.h
//
// Helpers shared by the CPU kernel tests only (random inputs, bit-exact comparison). Header-only;
// not part of tpserve_cpu_kernels' API.
#ifndef TPSERVE_KERNELS_CPU_TEST_UTIL_H_
#define TPSERVE_KERNELS_CPU_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tpserve::kernels::cpu::testing {

// Unit roundoff of float (2^-24).
inline constexpr double kUnitRoundoff = std::numeric_limits<float>::epsilon() / 2.0;

// n floats uniform in [lo, hi), reproducible from seed.
inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// True when a[0..n) and b[0..n) are bit-identical.
inline bool BitEqual(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// The gate and up halves, [m, f] each, of a fused gate+up product gate_up: [m, 2f] (gate
// columns first), as the gated activations (swiglu.h, geglu.h) read it.
inline void SplitGateUp(const std::vector<float>& gate_up, int64_t m, int64_t f,
                        std::vector<float>* gate, std::vector<float>* up) {
  gate->resize(m * f);
  up->resize(m * f);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < f; ++i) {
      (*gate)[r * f + i] = gate_up[r * 2 * f + i];
      (*up)[r * f + i] = gate_up[r * 2 * f + f + i];
    }
  }
}

}  // namespace tpserve::kernels::cpu::testing

#endif  // TPSERVE_KERNELS_CPU_TEST_UTIL_H_
