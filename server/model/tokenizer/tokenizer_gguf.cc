// Tokenizer::FromGguf: the tokenizer.ggml.* metadata keys, as llama.cpp writes them.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/tokenizer/tokenizer.h"

namespace tpserve::model {
namespace {

// GGUF token types (llama.cpp's llama_token_type).
constexpr int64_t kTypeUnknown = 2;
constexpr int64_t kTypeControl = 3;
constexpr int64_t kTypeUserDefined = 4;

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

absl::StatusOr<int32_t> OptionalId(const GgufFile& gguf, std::string_view key) {
  ASSIGN_OR_RETURN(int64_t id, Optional<int64_t>(gguf.GetInt(key), -1));
  return static_cast<int32_t>(id);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  ASSIGN_OR_RETURN(std::string model,
                   Required(gguf.GetString("tokenizer.ggml.model"), "tokenizer.ggml.model"));
  ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                   Required(gguf.GetStringArray("tokenizer.ggml.tokens"), "tokenizer.ggml.tokens"));
  ASSIGN_OR_RETURN(std::vector<int64_t> types,
                   Optional(gguf.GetIntArray("tokenizer.ggml.token_type"), {}));
  if (!types.empty() && types.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.token_type has ", types.size(),
                                                   " entries for ", tokens.size(), " tokens"));
  }
  TokenizerSpec spec;
  ASSIGN_OR_RETURN(int32_t unk_id, OptionalId(gguf, "tokenizer.ggml.unknown_token_id"));
  ASSIGN_OR_RETURN(spec.bos_id, OptionalId(gguf, "tokenizer.ggml.bos_token_id"));
  ASSIGN_OR_RETURN(spec.eos_id, OptionalId(gguf, "tokenizer.ggml.eos_token_id"));
  ASSIGN_OR_RETURN(spec.add_bos,
                   Optional(gguf.GetBool("tokenizer.ggml.add_bos_token"), model == "llama"));
  ASSIGN_OR_RETURN(spec.add_eos, Optional(gguf.GetBool("tokenizer.ggml.add_eos_token"), false));
  ASSIGN_OR_RETURN(spec.chat_template,
                   Optional<std::string>(gguf.GetString("tokenizer.chat_template"), ""));
  if (unk_id >= static_cast<int64_t>(tokens.size())) {
    return absl::InvalidArgumentError(absl::StrCat("unknown token id ", unk_id, " is outside ",
                                                   "the vocabulary of ", tokens.size()));
  }
  for (size_t id = 0; id < types.size(); ++id) {
    const int64_t type = types[id];
    if (type == kTypeControl || type == kTypeUserDefined || type == kTypeUnknown) {
      AddedToken t;
      t.id = static_cast<int32_t>(id);
      t.content = tokens[id];
      t.special = type != kTypeUserDefined;
      if (!t.content.empty()) spec.added_tokens.push_back(std::move(t));
    }
  }
  auto vocab = Vocab::FromTokens(std::move(tokens), unk_id);
  spec.vocab = vocab;
  if (model == "gpt2") {
    ASSIGN_OR_RETURN(
        std::vector<std::string> lines,
        Required(gguf.GetStringArray("tokenizer.ggml.merges"), "tokenizer.ggml.merges"));
    ASSIGN_OR_RETURN(std::vector<MergeRule> merges, ParseMergeLines(lines));
    ASSIGN_OR_RETURN(std::string pre,
                     Optional<std::string>(gguf.GetString("tokenizer.ggml.pre"), "gpt2"));
    ASSIGN_OR_RETURN(spec.model, NewByteLevelBpe(vocab, merges, pre, pre == "llama-bpe"));
  } else if (model == "llama") {
    ASSIGN_OR_RETURN(
        std::vector<double> scores,
        Required(gguf.GetFloatArray("tokenizer.ggml.scores"), "tokenizer.ggml.scores"));
    ASSIGN_OR_RETURN(bool prefix, Optional(gguf.GetBool("tokenizer.ggml.add_space_prefix"), true));
    SentencePieceOptions options;
    options.prepend =
        prefix ? SentencePieceOptions::Prepend::kAlways : SentencePieceOptions::Prepend::kNever;
    options.strip_leading_space = prefix;
    ASSIGN_OR_RETURN(spec.model,
                     NewSentencePieceBpeWithScores(
                         vocab, std::vector<float>(scores.begin(), scores.end()), options));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported tokenizer.ggml.model '", model, "' (supported: gpt2, llama)"));
  }
  return Create(std::move(spec));
}

}  // namespace tpserve::model
