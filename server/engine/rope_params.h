// The RoPE kernel parameters (kernels/cpu/rope.h) of a backend's RopeSettings: one mapping
// for every backend, so the CPU and CUDA backends rotate by identical angles. Pure function.
#ifndef TPSERVE_SERVER_ENGINE_ROPE_PARAMS_H_
#define TPSERVE_SERVER_ENGINE_ROPE_PARAMS_H_

#include "kernels/cpu/rope.h"
#include "server/engine/backend.h"

namespace tpserve::engine {

// cached_positions = rope.max_position.
kernels::cpu::RopeParams ToRopeParams(const RopeSettings& rope);

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_ROPE_PARAMS_H_
