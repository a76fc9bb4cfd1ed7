// ModelConfigFromHfJson: the Llama-family hyper-parameters from a Hugging Face config.json.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/weights/model_config.h"

namespace tpserve::model {
namespace {

using json = nlohmann::json;

absl::StatusOr<int64_t> IntField(const json& j, const char* key, std::optional<int64_t> fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback.has_value()) return *fallback;
    return absl::NotFoundError(absl::StrCat("config.json lacks ", key));
  }
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat("config.json ", key, " is too large"));
    }
    return static_cast<int64_t>(v);
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  // Some exporters write integral floats (e.g. 8192.0).
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      return static_cast<int64_t>(d);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("config.json ", key, " is not an integer"));
}

absl::StatusOr<double> FloatField(const json& j, const char* key, double fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json ", key, " is not a number"));
  }
  return it->get<double>();
}

absl::StatusOr<RopeScaling> ParseRopeScaling(const json& j) {
  RopeScaling rs;
  const auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return rs;
  if (!it->is_object()) {
    return absl::InvalidArgumentError("config.json rope_scaling is not an object");
  }
  const json& r = *it;
  // Newer configs say rope_type, older ones type.
  auto t = r.find("rope_type");
  if (t == r.end()) t = r.find("type");
  if (t == r.end() || !t->is_string()) {
    return absl::InvalidArgumentError("config.json rope_scaling has no rope_type");
  }
  const std::string type = t->get<std::string>();
  if (type == "default") return rs;
  if (type == "linear") {
    rs.type = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    rs.type = RopeScalingType::kLlama3;
    ASSIGN_OR_RETURN(rs.low_freq_factor, FloatField(r, "low_freq_factor", 1.0));
    ASSIGN_OR_RETURN(rs.high_freq_factor, FloatField(r, "high_freq_factor", 4.0));
    ASSIGN_OR_RETURN(rs.original_max_position,
                     IntField(r, "original_max_position_embeddings", std::nullopt));
  } else {
    return absl::UnimplementedError(
        absl::StrCat("config.json rope_scaling type \"", type, "\" is not supported"));
  }
  if (r.find("factor") == r.end()) {
    return absl::InvalidArgumentError("config.json rope_scaling has no factor");
  }
  ASSIGN_OR_RETURN(rs.factor, FloatField(r, "factor", 1.0));
  return rs;
}

// eos_token_id is an integer or a list of integers.
absl::StatusOr<std::vector<int64_t>> EosIds(const json& j) {
  std::vector<int64_t> ids;
  const auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return ids;
  if (!it->is_array()) {
    ASSIGN_OR_RETURN(const int64_t id, IntField(j, "eos_token_id", std::nullopt));
    ids.push_back(id);
    return ids;
  }
  for (const json& e : *it) {
    if (!e.is_number_integer()) {
      return absl::InvalidArgumentError("config.json eos_token_id list has a non-integer");
    }
    ids.push_back(e.get<int64_t>());
  }
  return ids;
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromHfJson(std::string_view config_json) {
  const json j = json::parse(config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("config.json is not a valid JSON object");
  }
  std::string arch_class;
  if (const auto a = j.find("architectures");
      a != j.end() && a->is_array() && !a->empty() && (*a)[0].is_string()) {
    arch_class = (*a)[0].get<std::string>();
  }
  std::string model_type;
  if (const auto m = j.find("model_type"); m != j.end() && m->is_string()) {
    model_type = m->get<std::string>();
  }
  ModelConfig c;
  if (arch_class == "LlamaForCausalLM" || arch_class == "MistralForCausalLM" ||
      (arch_class.empty() && (model_type == "llama" || model_type == "mistral"))) {
    c.architecture = "llama";  // llama.cpp converts Mistral to the llama architecture too
    c.rope_style = RopeStyle::kInterleaved;
  } else if (arch_class == "Qwen2ForCausalLM" || (arch_class.empty() && model_type == "qwen2")) {
    c.architecture = "qwen2";
    c.rope_style = RopeStyle::kNeox;
    c.attention_bias = true;
  } else {
    return absl::UnimplementedError(absl::StrCat("config.json architecture \"", arch_class,
                                                 "\" (model_type \"", model_type,
                                                 "\") is not supported"));
  }
  if (const auto n = j.find("_name_or_path"); n != j.end() && n->is_string()) {
    c.name = n->get<std::string>();
  }
  ASSIGN_OR_RETURN(c.vocab_size, IntField(j, "vocab_size", std::nullopt));
  ASSIGN_OR_RETURN(c.d_model, IntField(j, "hidden_size", std::nullopt));
  ASSIGN_OR_RETURN(c.n_layers, IntField(j, "num_hidden_layers", std::nullopt));
  ASSIGN_OR_RETURN(c.n_heads, IntField(j, "num_attention_heads", std::nullopt));
  ASSIGN_OR_RETURN(c.n_kv_heads, IntField(j, "num_key_value_heads", c.n_heads));
  ASSIGN_OR_RETURN(c.ffn_dim, IntField(j, "intermediate_size", std::nullopt));
  if (c.n_heads <= 0) return absl::InvalidArgumentError("config.json num_attention_heads <= 0");
  ASSIGN_OR_RETURN(c.head_dim, IntField(j, "head_dim", c.d_model / c.n_heads));
  ASSIGN_OR_RETURN(c.context_length, IntField(j, "max_position_embeddings", std::nullopt));
  ASSIGN_OR_RETURN(c.rope_theta, FloatField(j, "rope_theta", 10000.0));
  ASSIGN_OR_RETURN(c.norm_eps, FloatField(j, "rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(j));
  if (const auto t = j.find("tie_word_embeddings"); t != j.end() && !t->is_null()) {
    if (!t->is_boolean()) {
      return absl::InvalidArgumentError("config.json tie_word_embeddings is not a boolean");
    }
    c.tied_embeddings = t->get<bool>();
  }
  if (const auto b = j.find("attention_bias"); b != j.end() && b->is_boolean()) {
    c.attention_bias = b->get<bool>();
  }
  ASSIGN_OR_RETURN(c.bos_token_id, IntField(j, "bos_token_id", -1));
  ASSIGN_OR_RETURN(c.eos_token_ids, EosIds(j));
  RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace tpserve::model
