// Tokenizer::FromGguf: the tokenizer.ggml.* metadata keys, as llama.cpp writes them. The
// vocabulary, token types and special tokens are read here; tokenizer.ggml.model picks the
// TokenizerKind, whose own file reads its keys and builds the BpeModel (tokenizer_kind.h).
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/tokenizer/tokenizer.h"
#include "server/model/tokenizer/tokenizer_gguf_keys.h"
#include "server/model/tokenizer/tokenizer_kind.h"

namespace tpserve::model {
namespace {

using tokenizer_gguf::Optional;
using tokenizer_gguf::Required;

// GGUF token types (llama.cpp's llama_token_type).
constexpr int64_t kTypeUnknown = 2;
constexpr int64_t kTypeControl = 3;
constexpr int64_t kTypeUserDefined = 4;

absl::StatusOr<int32_t> OptionalId(const GgufFile& gguf, std::string_view key) {
  ASSIGN_OR_RETURN(int64_t id, Optional<int64_t>(gguf.GetInt(key), -1));
  return static_cast<int32_t>(id);
}

// The token strings and their types ([vocab_size], or empty when the file has none).
struct GgufTokens {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
};

absl::StatusOr<GgufTokens> ReadTokens(const GgufFile& gguf) {
  GgufTokens t;
  ASSIGN_OR_RETURN(t.tokens,
                   Required(gguf.GetStringArray("tokenizer.ggml.tokens"), "tokenizer.ggml.tokens"));
  ASSIGN_OR_RETURN(t.types, Optional(gguf.GetIntArray("tokenizer.ggml.token_type"), {}));
  if (!t.types.empty() && t.types.size() != t.tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.token_type has ", t.types.size(),
                                                   " entries for ", t.tokens.size(), " tokens"));
  }
  return t;
}

// BOS/EOS ids and flags (`adds_bos`: add_bos_token when the key is absent) and the chat
// template into `spec`; returns the unknown token's id (-1: none).
absl::StatusOr<int32_t> ReadSpecialTokens(const GgufFile& gguf, bool adds_bos,
                                          TokenizerSpec* spec) {
  ASSIGN_OR_RETURN(int32_t unk_id, OptionalId(gguf, "tokenizer.ggml.unknown_token_id"));
  ASSIGN_OR_RETURN(spec->bos_id, OptionalId(gguf, "tokenizer.ggml.bos_token_id"));
  ASSIGN_OR_RETURN(spec->eos_id, OptionalId(gguf, "tokenizer.ggml.eos_token_id"));
  ASSIGN_OR_RETURN(spec->add_bos, Optional(gguf.GetBool("tokenizer.ggml.add_bos_token"), adds_bos));
  ASSIGN_OR_RETURN(spec->add_eos, Optional(gguf.GetBool("tokenizer.ggml.add_eos_token"), false));
  ASSIGN_OR_RETURN(spec->chat_template,
                   Optional<std::string>(gguf.GetString("tokenizer.chat_template"), ""));
  return unk_id;
}

// Control, user-defined and unknown tokens (by their type) are split out of the text before
// BPE; user-defined ones are not special.
std::vector<AddedToken> AddedTokensByType(const GgufTokens& t) {
  std::vector<AddedToken> added;
  for (size_t id = 0; id < t.types.size(); ++id) {
    const int64_t type = t.types[id];
    if (type == kTypeControl || type == kTypeUserDefined || type == kTypeUnknown) {
      AddedToken token;
      token.id = static_cast<int32_t>(id);
      token.content = t.tokens[id];
      token.special = type != kTypeUserDefined;
      if (!token.content.empty()) added.push_back(std::move(token));
    }
  }
  return added;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  ASSIGN_OR_RETURN(std::string model,
                   Required(gguf.GetString("tokenizer.ggml.model"), "tokenizer.ggml.model"));
  // An unsupported model is reported once the vocabulary has been read.
  const absl::StatusOr<TokenizerKind> kind = KindOfGgufModel(model);
  ASSIGN_OR_RETURN(GgufTokens tokens, ReadTokens(gguf));
  TokenizerSpec spec;
  ASSIGN_OR_RETURN(int32_t unk_id,
                   ReadSpecialTokens(gguf, kind.ok() && LoadersOf(*kind).gguf_adds_bos, &spec));
  if (unk_id >= static_cast<int64_t>(tokens.tokens.size())) {
    return absl::InvalidArgumentError(absl::StrCat("unknown token id ", unk_id, " is outside ",
                                                   "the vocabulary of ", tokens.tokens.size()));
  }
  spec.added_tokens = AddedTokensByType(tokens);
  std::shared_ptr<const Vocab> vocab = Vocab::FromTokens(std::move(tokens.tokens), unk_id);
  spec.vocab = vocab;
  RETURN_IF_ERROR(kind.status());
  ASSIGN_OR_RETURN(spec.model, LoadersOf(*kind).from_gguf(gguf, vocab));
  return Create(std::move(spec));
}

}  // namespace tpserve::model
