// ModelConfig: the hyper-parameters of a Llama-family decoder (Llama 2/3, Mistral, Qwen2,
// SmolLM2), read from GGUF metadata or a Hugging Face config.json, with Validate() checking
// that the shapes are consistent. Plain data; thread-compatible.
#ifndef TPSERVE_SERVER_MODEL_WEIGHTS_MODEL_CONFIG_H_
#define TPSERVE_SERVER_MODEL_WEIGHTS_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/model/gguf/gguf_file.h"

namespace tpserve::model {

enum class RopeScalingType { kNone, kLinear, kLlama3 };

// How position frequencies are rescaled for long contexts.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;                // linear and llama3
  double low_freq_factor = 1.0;       // llama3
  double high_freq_factor = 4.0;      // llama3
  int64_t original_max_position = 0;  // llama3 (original_max_position_embeddings)
};

// Which pairs of a head's Q/K rows RoPE rotates together, in the row order that
// WeightSource presents. kInterleaved: rows (2i, 2i+1) (llama.cpp's permuted Llama/Mistral
// GGUF layout); kNeox: rows (i, i + head_dim/2) (Qwen2 in GGUF).
enum class RopeStyle { kInterleaved, kNeox };

struct ModelConfig {
  std::string architecture;  // "llama", "mistral" or "qwen2" (GGUF general.architecture)
  std::string name;          // general.name / _name_or_path; may be empty
  int64_t vocab_size = 0;
  int64_t d_model = 0;  // embedding width
  int64_t n_layers = 0;
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  int64_t head_dim = 0;    // usually d_model / n_heads
  int64_t ffn_dim = 0;     // SwiGLU hidden width
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  RopeStyle rope_style = RopeStyle::kInterleaved;
  double norm_eps = 1e-5;  // RMSNorm epsilon
  int64_t context_length = 0;
  bool tied_embeddings = false;  // LM head is token_embd.weight (no output.weight)
  bool attention_bias = false;   // Q/K/V projections have biases (Qwen2)
  int64_t bos_token_id = -1;     // -1 when unknown
  std::vector<int64_t> eos_token_ids;

  // OK, or InvalidArgument naming the first inconsistent field.
  absl::Status Validate() const;
  // Every field as JSON (rope_scaling.type as "none" | "linear" | "llama3").
  nlohmann::json ToJson() const;
};

std::string_view RopeScalingTypeName(RopeScalingType type);

// From GGUF metadata (`<arch>.` keys). Tied when the file has no output.weight tensor;
// vocab_size from tokenizer.ggml.tokens when `<arch>.vocab_size` is absent. Validated.
absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& file);

// From the text of a Hugging Face config.json (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM). Mistral maps to architecture "llama", as llama.cpp converts it.
// Validated.
absl::StatusOr<ModelConfig> ModelConfigFromHfJson(std::string_view config_json);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_WEIGHTS_MODEL_CONFIG_H_
