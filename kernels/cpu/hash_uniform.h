// HashUniform: a counter-based uniform value in [-1, 1) from (seed, index), identical on the
// host and in CUDA device code (so a synthetic model made on the GPU holds the same values as
// one made on the CPU, up to the GPU's bf16 rounding). Pure function; thread-safe.
#ifndef TPSERVE_KERNELS_CPU_HASH_UNIFORM_H_
#define TPSERVE_KERNELS_CPU_HASH_UNIFORM_H_

#include <cstdint>

#ifdef __CUDACC__
#define TPSERVE_HOST_DEVICE __host__ __device__
#else
#define TPSERVE_HOST_DEVICE
#endif

namespace tpserve::kernels {

// splitmix64 of the pair; the top 24 bits scaled to [-1, 1).
TPSERVE_HOST_DEVICE inline float HashUniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + index + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace tpserve::kernels

#endif  // TPSERVE_KERNELS_CPU_HASH_UNIFORM_H_
