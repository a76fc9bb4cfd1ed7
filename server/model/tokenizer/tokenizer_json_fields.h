// Reading a Hugging Face tokenizer.json without exceptions: typed field access and its
// normalizer / pre-tokenizer / decoder pipeline flattened, shared by the tokenizer.json
// loader (tokenizer_json.cc) and the recognisers of each tokenizer kind. Internal to the
// tokenizer library. Stateless functions; thread-safe.
#ifndef TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_JSON_FIELDS_H_
#define TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_JSON_FIELDS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpserve::model::tokenizer_json {

using json = nlohmann::json;

// InvalidArgument "tokenizer.json: <what>".
absl::Status Bad(std::string_view what);

// Typed fields: absent or null gives `fallback`, a wrong type is an error naming the field.
absl::StatusOr<bool> BoolField(const json& obj, const char* key, bool fallback);
absl::StatusOr<std::string> StringField(const json& obj, const char* key, std::string fallback);

// The "type" of a component object ("" for null).
absl::StatusOr<std::string> TypeOf(const json& component);

// A component, or the members of a "Sequence" component (listed under `list_key`), as a flat
// list; none for null.
absl::StatusOr<std::vector<const json*>> Flatten(const json& component, const char* list_key);

// The normalizer, pre-tokenizer and decoder of a tokenizer.json, each flattened. Pointers
// into the root the pipeline was read from.
struct Pipeline {
  std::vector<const json*> normalizers;
  std::vector<const json*> pre_tokenizers;
  std::vector<std::string> pre_types;  // [pre_tokenizers.size()]: each one's "type"
  std::vector<const json*> decoders;
};
absl::StatusOr<Pipeline> ReadPipeline(const json& root);

}  // namespace tpserve::model::tokenizer_json

#endif  // TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_JSON_FIELDS_H_
