// TokenizerKind: the BPE variants a Tokenizer is built as. Each kind has one file that
// recognises it in a model's files and builds its BpeModel: byte-level BPE in
// tokenizer_byte_level.cc, SentencePiece-style BPE in tokenizer_sentencepiece.cc. The
// loaders (tokenizer_json.cc, tokenizer_gguf.cc) pick a kind and call its builders through
// the one table here. Internal to the tokenizer library. Stateless; thread-safe.
#ifndef TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_KIND_H_
#define TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_KIND_H_

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/model/gguf/gguf_file.h"
#include "server/model/tokenizer/bpe.h"
#include "server/model/tokenizer/tokenizer_json_fields.h"

namespace tpserve::model {

enum class TokenizerKind {
  kByteLevel,      // byte-level BPE: GPT-2, Llama 3, SmolLM2, Qwen2
  kSentencePiece,  // SentencePiece-style BPE: Llama 2, Mistral
};

// What one kind knows of the model files, and how it builds its BpeModel from them.
struct TokenizerKindLoaders {
  TokenizerKind kind;
  std::string_view gguf_model;  // its tokenizer.ggml.model
  bool gguf_adds_bos;           // tokenizer.ggml.add_bos_token when the key is absent
  // From tokenizer.json: checks that `pipeline` is one this kind supports (an error names
  // what is not), then builds from `model` (the "model" object), `vocab` and `merges`.
  absl::StatusOr<std::unique_ptr<BpeModel>> (*from_json)(const tokenizer_json::Pipeline& pipeline,
                                                         const tokenizer_json::json& model,
                                                         std::shared_ptr<const Vocab> vocab,
                                                         const std::vector<MergeRule>& merges);
  // From GGUF metadata: the kind's own tokenizer.ggml.* keys; a missing required key is
  // InvalidArgument naming it.
  absl::StatusOr<std::unique_ptr<BpeModel>> (*from_gguf)(const GgufFile& gguf,
                                                         std::shared_ptr<const Vocab> vocab);
};

// Each kind's entry, defined in its own file.
const TokenizerKindLoaders& ByteLevelLoaders();      // tokenizer_byte_level.cc
const TokenizerKindLoaders& SentencePieceLoaders();  // tokenizer_sentencepiece.cc

// The entry of `kind`.
const TokenizerKindLoaders& LoadersOf(TokenizerKind kind);

// The kind whose tokenizer.ggml.model is `model`; InvalidArgument naming it otherwise.
absl::StatusOr<TokenizerKind> KindOfGgufModel(std::string_view model);

// A tokenizer.json is byte-level when its last pre-tokenizer is ByteLevel; any other is taken
// as SentencePiece-style, whose from_json says what it does not support.
TokenizerKind KindOfJson(const tokenizer_json::Pipeline& pipeline);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_KIND_H_
