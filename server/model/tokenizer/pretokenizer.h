// PreTokenizer: splits text into the pieces ("words") that BPE merges within, by the regex
// set of one named pre-tokenizer type (llama.cpp's tokenizer.ggml.pre names). Each regex of
// the set splits every piece of the previous one into its matches and the gaps between them
// (Hugging Face's Split with behaviour Isolated). Regexes are PCRE2 with UTF, UCP and JIT.
// Immutable after Create; Split is thread-safe.
#ifndef TPSERVE_SERVER_MODEL_TOKENIZER_PRETOKENIZER_H_
#define TPSERVE_SERVER_MODEL_TOKENIZER_PRETOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve::model {

class PreTokenizer {
 public:
  // Types: "gpt2"; "smollm", "starcoder", "refact" (each digit alone, then gpt2);
  // "llama-bpe"/"llama3" (Llama 3); "qwen2"; "none" (the whole text is one piece, as for
  // SentencePiece-style BPE). Any other name is InvalidArgument naming it.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(std::string_view type);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text` (valid UTF-8, unchecked) to `pieces`, in order; they cover
  // `text` exactly. Empty text gives no pieces.
  void Split(std::string_view text, std::vector<std::string_view>* pieces) const;

  const std::string& type() const { return type_; }

 private:
  struct Regex;
  PreTokenizer() = default;

  std::string type_;
  std::vector<std::unique_ptr<Regex>> regexes_;  // applied in order
};

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_TOKENIZER_PRETOKENIZER_H_
