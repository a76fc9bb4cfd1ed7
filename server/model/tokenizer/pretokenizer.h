// PreTokenizer: splits text into the pieces ("words") that BPE merges within, by the regex
// set of one pre-tokenizer type (named as llama.cpp's tokenizer.ggml.pre names them). Each regex of
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

// The regex sets a byte-level BPE splits text by.
enum class PreTokenizerType {
  kNone,        // the whole text is one piece (SentencePiece-style BPE)
  kGpt2,        // GPT-2's regex
  kDigitsGpt2,  // each digit alone, then GPT-2's regex (SmolLM, StarCoder, Refact)
  kLlama3,      // Llama 3's regex (digits in threes)
  kQwen2,       // Qwen2's regex (each digit alone)
};

// The type a tokenizer.ggml.pre name stands for: "gpt2"; "smollm", "starcoder", "refact";
// "llama-bpe", "llama3"; "qwen2"; "none". Any other name is InvalidArgument naming it.
absl::StatusOr<PreTokenizerType> PreTokenizerTypeFromName(std::string_view name);

class PreTokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(PreTokenizerType type);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text` (valid UTF-8, unchecked) to `pieces`, in order; they cover
  // `text` exactly. Empty text gives no pieces.
  void Split(std::string_view text, std::vector<std::string_view>* pieces) const;

  PreTokenizerType type() const { return type_; }

 private:
  struct Regex;
  PreTokenizer() = default;

  PreTokenizerType type_ = PreTokenizerType::kNone;
  std::vector<std::unique_ptr<Regex>> regexes_;  // applied in order
};

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_TOKENIZER_PRETOKENIZER_H_
