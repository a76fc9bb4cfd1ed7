// Philox4x32-10: a counter-based random generator (Salmon et al., SC'11). A draw is a pure
// function of (key, counter), which is what makes sampling replayable: the i-th generated
// token of a request uses counter i, whatever happened before (preemption, recovery).
// Stateless; thread-safe.
#ifndef TPSERVE_SERVER_ENGINE_PHILOX_H_
#define TPSERVE_SERVER_ENGINE_PHILOX_H_

#include <array>
#include <cstdint>

namespace tpserve::engine {

// The four 32-bit outputs of Philox4x32 with 10 rounds for a 128-bit counter and 64-bit key.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// A uniform draw in [0, 1) with 53 random bits, determined by (seed, index, stream).
// `stream` separates independent uses of the same (seed, index).
double PhiloxUniform(uint64_t seed, uint64_t index, uint32_t stream = 0);

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_PHILOX_H_
