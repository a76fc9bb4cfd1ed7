// ModelConfigFromGguf: the Llama-family hyper-parameters from GGUF metadata.
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/weights/model_config.h"

namespace tpserve::model {
namespace {

// The value of an integer key, `fallback` when absent; a mistyped or oversized value is an
// error naming the key.
absl::StatusOr<int64_t> IntKey(const GgufFile& f, const std::string& key,
                               std::optional<int64_t> fallback) {
  absl::StatusOr<uint64_t> v = f.GetUint(key);
  if (absl::IsNotFound(v.status())) {
    if (fallback.has_value()) return *fallback;
    return absl::NotFoundError(absl::StrCat("GGUF metadata lacks ", key));
  }
  if (!v.ok()) return v.status();
  if (*v > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF ", key, " = ", *v, " is too large"));
  }
  return static_cast<int64_t>(*v);
}

absl::StatusOr<double> FloatKey(const GgufFile& f, const std::string& key, double fallback) {
  absl::StatusOr<double> v = f.GetFloat(key);
  if (absl::IsNotFound(v.status())) return fallback;
  return v;
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& file) {
  ModelConfig c;
  ASSIGN_OR_RETURN(c.architecture, file.GetString("general.architecture"));
  const std::string& a = c.architecture;
  if (a != "llama" && a != "mistral" && a != "qwen2") {
    return absl::UnimplementedError(
        absl::StrCat("GGUF architecture \"", a, "\" is not supported (llama, mistral, qwen2)"));
  }
  if (const absl::StatusOr<std::string> n = file.GetString("general.name"); n.ok()) c.name = *n;

  ASSIGN_OR_RETURN(c.d_model, IntKey(file, a + ".embedding_length", std::nullopt));
  ASSIGN_OR_RETURN(c.n_layers, IntKey(file, a + ".block_count", std::nullopt));
  ASSIGN_OR_RETURN(c.ffn_dim, IntKey(file, a + ".feed_forward_length", std::nullopt));
  ASSIGN_OR_RETURN(c.n_heads, IntKey(file, a + ".attention.head_count", std::nullopt));
  ASSIGN_OR_RETURN(c.n_kv_heads, IntKey(file, a + ".attention.head_count_kv", c.n_heads));
  ASSIGN_OR_RETURN(c.context_length, IntKey(file, a + ".context_length", std::nullopt));
  if (c.n_heads <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF ", a, ".attention.head_count is 0"));
  }
  // head_dim: key_length when present, else the rope dimension, else d_model / n_heads.
  ASSIGN_OR_RETURN(const int64_t rope_dim,
                   IntKey(file, a + ".rope.dimension_count", c.d_model / c.n_heads));
  ASSIGN_OR_RETURN(c.head_dim, IntKey(file, a + ".attention.key_length", rope_dim));
  if (rope_dim != c.head_dim) {
    return absl::UnimplementedError(absl::StrCat("GGUF ", a, ".rope.dimension_count = ", rope_dim,
                                                 " differs from head_dim ", c.head_dim,
                                                 " (partial RoPE is not supported)"));
  }
  ASSIGN_OR_RETURN(const int64_t value_length,
                   IntKey(file, a + ".attention.value_length", c.head_dim));
  if (value_length != c.head_dim) {
    return absl::UnimplementedError(absl::StrCat(
        "GGUF ", a, ".attention.value_length = ", value_length, " differs from key_length"));
  }
  ASSIGN_OR_RETURN(c.rope_theta, FloatKey(file, a + ".rope.freq_base", 10000.0));
  ASSIGN_OR_RETURN(c.norm_eps, FloatKey(file, a + ".attention.layer_norm_rms_epsilon", 1e-5));

  absl::StatusOr<std::string> scaling = file.GetString(a + ".rope.scaling.type");
  if (scaling.ok() && *scaling != "none") {
    if (*scaling != "linear") {
      return absl::UnimplementedError(
          absl::StrCat("GGUF ", a, ".rope.scaling.type \"", *scaling, "\" is not supported"));
    }
    c.rope_scaling.type = RopeScalingType::kLinear;
    ASSIGN_OR_RETURN(c.rope_scaling.factor, FloatKey(file, a + ".rope.scaling.factor", 1.0));
  } else if (!scaling.ok() && !absl::IsNotFound(scaling.status())) {
    return scaling.status();
  }
  if (file.FindTensor("rope_freqs.weight") != nullptr) {
    // llama.cpp stores Llama 3 rope scaling as per-frequency factors, not as parameters.
    return absl::UnimplementedError(
        "GGUF rope_freqs.weight (Llama 3 rope scaling factors) is not supported");
  }
  c.rope_style = a == "qwen2" ? RopeStyle::kNeox : RopeStyle::kInterleaved;

  absl::StatusOr<uint64_t> vocab = file.GetUint(a + ".vocab_size");
  if (vocab.ok()) {
    ASSIGN_OR_RETURN(c.vocab_size, IntKey(file, a + ".vocab_size", std::nullopt));
  } else if (absl::IsNotFound(vocab.status())) {
    const GgufValue* tokens = file.Find("tokenizer.ggml.tokens");
    const auto* list =
        tokens == nullptr ? nullptr : std::get_if<std::vector<GgufValue>>(&tokens->value);
    if (list == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("GGUF metadata lacks ", a, ".vocab_size and tokenizer.ggml.tokens"));
    }
    c.vocab_size = static_cast<int64_t>(list->size());
  } else {
    return vocab.status();
  }

  c.tied_embeddings = file.FindTensor("output.weight") == nullptr;
  c.attention_bias = file.FindTensor("blk.0.attn_q.bias") != nullptr;
  ASSIGN_OR_RETURN(c.bos_token_id, IntKey(file, "tokenizer.ggml.bos_token_id", -1));
  ASSIGN_OR_RETURN(const int64_t eos, IntKey(file, "tokenizer.ggml.eos_token_id", -1));
  if (eos >= 0) c.eos_token_ids.push_back(eos);
  RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace tpserve::model
