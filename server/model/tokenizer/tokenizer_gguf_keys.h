// Reading tokenizer.ggml.* metadata keys of a GgufFile as required or optional, shared by the
// GGUF tokenizer loader (tokenizer_gguf.cc) and the builders of each tokenizer kind. Internal
// to the tokenizer library. Stateless; thread-safe.
#ifndef TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_GGUF_KEYS_H_
#define TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_GGUF_KEYS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tpserve::model::tokenizer_gguf {

// A required key's value; a missing key is InvalidArgument naming it.
template <typename T>
absl::StatusOr<T> Required(absl::StatusOr<T> value, std::string_view key) {
  if (absl::IsNotFound(value.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF has no tokenizer key '", std::string(key), "'"));
  }
  return value;
}

// An optional key's value, `fallback` when missing; other errors (wrong type) are returned.
template <typename T>
absl::StatusOr<T> Optional(absl::StatusOr<T> value, T fallback) {
  if (absl::IsNotFound(value.status())) return fallback;
  return value;
}

}  // namespace tpserve::model::tokenizer_gguf

#endif  // TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_GGUF_KEYS_H_
