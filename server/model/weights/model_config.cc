#include "server/model/weights/model_config.h"

#include <cmath>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace tpserve::model {
namespace {

// Upper bounds that keep every derived size (rows x cols, KV bytes) far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxContext = int64_t{1} << 24;

absl::Status InRange(std::string_view field, int64_t v, int64_t hi) {
  if (v <= 0 || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: ", std::string(field), " = ", v, " is outside [1, ", hi, "]"));
  }
  return absl::OkStatus();
}

absl::Status Invalid(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("model config: ", std::string(field), " ", std::string(why)));
}

}  // namespace

std::string_view RopeScalingTypeName(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone:
      return "none";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kLlama3:
      return "llama3";
  }
  return "none";
}

absl::Status ModelConfig::Validate() const {
  if (architecture.empty()) return Invalid("architecture", "is empty");
  for (const auto& [field, v, hi] :
       {std::tuple<std::string_view, int64_t, int64_t>{"vocab_size", vocab_size, kMaxVocab},
        {"d_model", d_model, kMaxDim},
        {"n_layers", n_layers, kMaxLayers},
        {"n_heads", n_heads, kMaxDim},
        {"n_kv_heads", n_kv_heads, kMaxDim},
        {"head_dim", head_dim, kMaxDim},
        {"ffn_dim", ffn_dim, kMaxDim},
        {"context_length", context_length, kMaxContext}}) {
    if (absl::Status s = InRange(field, v, hi); !s.ok()) return s;
  }
  if (n_heads % n_kv_heads != 0) {
    return Invalid("n_heads",
                   absl::StrCat("= ", n_heads, " is not a multiple of n_kv_heads = ", n_kv_heads));
  }
  if (head_dim % 2 != 0) {
    return Invalid("head_dim", absl::StrCat("= ", head_dim, " is odd (RoPE rotates pairs)"));
  }
  // head_dim * n_heads may differ from d_model (Mistral Nemo), but must stay a sane width.
  if (head_dim * n_heads > kMaxDim) {
    return Invalid("head_dim",
                   absl::StrCat("* n_heads = ", head_dim * n_heads, " exceeds ", kMaxDim));
  }
  if (!std::isfinite(rope_theta) || rope_theta <= 0) {
    return Invalid("rope_theta", absl::StrCat("= ", rope_theta, " is not a positive number"));
  }
  if (!std::isfinite(norm_eps) || norm_eps <= 0 || norm_eps >= 1) {
    return Invalid("norm_eps", absl::StrCat("= ", norm_eps, " is outside (0, 1)"));
  }
  const RopeScaling& rs = rope_scaling;
  if (rs.type != RopeScalingType::kNone && (!std::isfinite(rs.factor) || rs.factor <= 0)) {
    return Invalid("rope_scaling.factor", absl::StrCat("= ", rs.factor, " is not positive"));
  }
  if (rs.type == RopeScalingType::kLlama3) {
    if (!std::isfinite(rs.low_freq_factor) || !std::isfinite(rs.high_freq_factor) ||
        rs.low_freq_factor <= 0 || rs.high_freq_factor <= rs.low_freq_factor) {
      return Invalid("rope_scaling.high_freq_factor",
                     absl::StrCat("= ", rs.high_freq_factor,
                                  " must exceed low_freq_factor = ", rs.low_freq_factor, " > 0"));
    }
    if (rs.original_max_position <= 0) {
      return Invalid("rope_scaling.original_max_position",
                     absl::StrCat("= ", rs.original_max_position, " is not positive"));
    }
  }
  if (bos_token_id < -1 || bos_token_id >= vocab_size) {
    return Invalid("bos_token_id", absl::StrCat("= ", bos_token_id, " is outside the vocabulary (",
                                                vocab_size, ")"));
  }
  for (const int64_t eos : eos_token_ids) {
    if (eos < 0 || eos >= vocab_size) {
      return Invalid("eos_token_ids",
                     absl::StrCat("has ", eos, ", outside the vocabulary (", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

nlohmann::json ModelConfig::ToJson() const {
  nlohmann::json j;
  j["architecture"] = architecture;
  j["name"] = name;
  j["vocab_size"] = vocab_size;
  j["d_model"] = d_model;
  j["n_layers"] = n_layers;
  j["n_heads"] = n_heads;
  j["n_kv_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  j["ffn_dim"] = ffn_dim;
  j["rope_theta"] = rope_theta;
  j["rope_scaling"] = {{"type", std::string(RopeScalingTypeName(rope_scaling.type))},
                       {"factor", rope_scaling.factor},
                       {"low_freq_factor", rope_scaling.low_freq_factor},
                       {"high_freq_factor", rope_scaling.high_freq_factor},
                       {"original_max_position", rope_scaling.original_max_position}};
  j["rope_style"] = rope_style == RopeStyle::kNeox ? "neox" : "interleaved";
  j["norm_eps"] = norm_eps;
  j["context_length"] = context_length;
  j["tied_embeddings"] = tied_embeddings;
  j["attention_bias"] = attention_bias;
  j["bos_token_id"] = bos_token_id;
  j["eos_token_ids"] = eos_token_ids;
  return j;
}

}  // namespace tpserve::model
