#include "server/model/tokenizer/tokenizer_json_fields.h"

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"

namespace tpserve::model::tokenizer_json {

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", std::string(what)));
}

absl::StatusOr<bool> BoolField(const json& obj, const char* key, bool fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Bad(absl::StrCat("'", key, "' is not a boolean"));
  return it->get<bool>();
}

absl::StatusOr<std::string> StringField(const json& obj, const char* key, std::string fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) return Bad(absl::StrCat("'", key, "' is not a string"));
  return it->get<std::string>();
}

absl::StatusOr<std::string> TypeOf(const json& component) {
  if (component.is_null()) return std::string();
  if (!component.is_object()) return Bad("a component is not an object");
  return StringField(component, "type", "");
}

absl::StatusOr<std::vector<const json*>> Flatten(const json& component, const char* list_key) {
  std::vector<const json*> out;
  ASSIGN_OR_RETURN(std::string type, TypeOf(component));
  if (type.empty()) return out;
  if (type != "Sequence") {
    out.push_back(&component);
    return out;
  }
  auto it = component.find(list_key);
  if (it == component.end() || !it->is_array()) return Bad("Sequence without a list");
  for (const json& member : *it) {
    ASSIGN_OR_RETURN(std::vector<const json*> inner, Flatten(member, list_key));
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

absl::StatusOr<Pipeline> ReadPipeline(const json& root) {
  const json null_json;  // Flatten of null holds no pointer to it
  auto part = [&](const char* key) -> const json& {
    auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  Pipeline p;
  ASSIGN_OR_RETURN(p.pre_tokenizers, Flatten(part("pre_tokenizer"), "pretokenizers"));
  ASSIGN_OR_RETURN(p.normalizers, Flatten(part("normalizer"), "normalizers"));
  ASSIGN_OR_RETURN(p.decoders, Flatten(part("decoder"), "decoders"));
  for (const json* pre : p.pre_tokenizers) {
    ASSIGN_OR_RETURN(std::string type, TypeOf(*pre));
    p.pre_types.push_back(std::move(type));
  }
  return p;
}

}  // namespace tpserve::model::tokenizer_json
