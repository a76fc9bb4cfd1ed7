// Tokenizer: text <-> token ids for one model: its vocabulary, its added/special tokens
// (split out of the text before BPE), and a BpeModel (byte-level or SentencePiece-style).
// Loaded from GGUF metadata (tokenizer_gguf.cc) or a Hugging Face tokenizer.json
// (tokenizer_json.cc). Immutable after loading; every method is thread-safe.
#ifndef TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_H_
#define TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/model/gguf/gguf_file.h"
#include "server/model/tokenizer/bpe.h"
#include "server/model/tokenizer/tokenizer_added_tokens.h"

namespace tpserve::model {

// Everything a loader gathers; Tokenizer::Create checks and assembles it.
struct TokenizerSpec {
  std::shared_ptr<const Vocab> vocab;
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added_tokens;  // ids within the vocabulary
  int32_t bos_id = -1;                   // -1: none
  int32_t eos_id = -1;
  bool add_bos = false;       // Encode(add_special=true) prepends BOS
  bool add_eos = false;       // ... and appends EOS
  std::string chat_template;  // Jinja text from the model files, or empty
};

class Tokenizer {
 public:
  // InvalidArgument when an id (added token, bos, eos) is outside the vocabulary or a token a
  // flag asks for is absent.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerSpec spec);

  // From GGUF metadata (tokenizer.ggml.*): models "gpt2" (byte-level BPE, by
  // tokenizer.ggml.pre) and "llama" (SentencePiece BPE by scores). A missing key is
  // InvalidArgument naming it.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);
  // From the text of a Hugging Face tokenizer.json.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text);
  // Same, with the text of its tokenizer_config.json (may be empty): chat_template, and
  // add_bos_token / add_eos_token when tokenizer.json has no post-processor saying so.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJsonWithConfig(
      std::string_view json_text, std::string_view config_text);
  // From a path: a .gguf file, a tokenizer.json file, or a directory holding tokenizer.json
  // (its tokenizer_config.json, when present, supplies chat_template and add_bos/add_eos).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);

  // Text (must be valid UTF-8, else InvalidArgument with the offset) to ids. Added tokens in
  // the text are recognised (as Hugging Face tokenizers do) except where they would overlap a
  // range of `literal` (sorted, disjoint byte ranges of `text`, e.g. chat message content),
  // which is encoded as plain text; `add_special` adds BOS/EOS as the model asks.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special,
                                              absl::Span<const ByteRange> literal = {}) const;
  // Ids to text. Bytes that do not form UTF-8 become U+FFFD. An id outside the vocabulary
  // is InvalidArgument.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids, bool skip_special) const;

  // The token's string as the vocabulary spells it (e.g. "Ġthe", "▁the", "<0x0A>"); empty
  // for an id outside the vocabulary (a model may have more embedding rows than tokens).
  std::string_view TokenPiece(int32_t id) const {
    return IsValidId(id) ? std::string_view{vocab_->tokens[id]} : std::string_view{};
  }
  // The bytes the token decodes to (possibly part of a UTF-8 character); empty outside the
  // vocabulary.
  std::string_view TokenBytes(int32_t id) const {
    return IsValidId(id) ? std::string_view{token_bytes_[id]} : std::string_view{};
  }
  bool IsValidId(int32_t id) const { return id >= 0 && id < vocab_size(); }
  bool IsSpecial(int32_t id) const { return IsValidId(id) && special_[id]; }
  // Whether decoding drops one space at the very start of the text (SentencePiece prefix).
  bool StripsLeadingSpace() const { return model_->StripsLeadingSpace(); }

  int32_t vocab_size() const { return static_cast<int32_t>(vocab_->tokens.size()); }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  const std::string& chat_template() const { return chat_template_; }

 private:
  Tokenizer() = default;

  std::shared_ptr<const Vocab> vocab_;
  std::unique_ptr<BpeModel> model_;
  AddedTokenMatcher added_;
  std::vector<std::string> token_bytes_;  // [vocab_size]
  std::vector<bool> special_;             // [vocab_size]
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  std::string chat_template_;
};

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_H_
