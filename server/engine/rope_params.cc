#include "server/engine/rope_params.h"

namespace tpserve::engine {

kernels::cpu::RopeParams ToRopeParams(const RopeSettings& rope) {
  namespace k = ::tpserve::kernels::cpu;
  k::RopeParams p;
  p.head_dim = rope.head_dim;
  p.theta = rope.theta;
  p.layout =
      rope.style == model::RopeStyle::kNeox ? k::RopeLayout::kNeox : k::RopeLayout::kInterleaved;
  switch (rope.scaling.type) {
    case model::RopeScalingType::kNone:
      p.scaling = k::RopeScaling::kNone;
      break;
    case model::RopeScalingType::kLinear:
      p.scaling = k::RopeScaling::kLinear;
      break;
    case model::RopeScalingType::kLlama3:
      p.scaling = k::RopeScaling::kLlama3;
      break;
  }
  p.factor = rope.scaling.factor;
  p.low_freq_factor = rope.scaling.low_freq_factor;
  p.high_freq_factor = rope.scaling.high_freq_factor;
  p.original_max_position_embeddings = static_cast<double>(rope.scaling.original_max_position);
  p.cached_positions = rope.max_position;
  return p;
}

}  // namespace tpserve::engine
