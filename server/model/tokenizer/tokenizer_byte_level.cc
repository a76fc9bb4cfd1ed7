// TokenizerKind::kByteLevel: byte-level BPE (GPT-2, Llama 3, SmolLM2, Qwen2), recognised in a
// tokenizer.json by its ByteLevel pre-tokenizer and decoder, and in GGUF by
// tokenizer.ggml.model "gpt2" with tokenizer.ggml.merges and tokenizer.ggml.pre.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/tokenizer/pretokenizer.h"
#include "server/model/tokenizer/tokenizer_gguf_keys.h"
#include "server/model/tokenizer/tokenizer_kind.h"

namespace tpserve::model {
namespace {

using tokenizer_json::Bad;
using tokenizer_json::BoolField;
using tokenizer_json::json;
using tokenizer_json::Pipeline;
using tokenizer_json::StringField;
using tokenizer_json::TypeOf;

// The Split regexes of tokenizer.json files as Hugging Face writes them.
constexpr char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A Split pre-tokenizer's regex, or error.
absl::StatusOr<std::string> SplitRegex(const json& split) {
  auto pattern = split.find("pattern");
  if (pattern == split.end() || !pattern->is_object()) return Bad("Split without a pattern");
  ASSIGN_OR_RETURN(std::string regex, StringField(*pattern, "Regex", ""));
  ASSIGN_OR_RETURN(std::string behavior, StringField(split, "behavior", ""));
  ASSIGN_OR_RETURN(bool invert, BoolField(split, "invert", false));
  if (regex.empty() || behavior != "Isolated" || invert) {
    return Bad("unsupported Split pre-tokenizer (need a Regex, Isolated, not inverted)");
  }
  return regex;
}

// The PreTokenizer a pre-tokenizer sequence ending in ByteLevel stands for: ByteLevel alone
// (GPT-2), Digits + ByteLevel (SmolLM) or a known Split regex + ByteLevel (Llama 3, Qwen2).
absl::StatusOr<PreTokenizerType> RecognisePreTokenizer(const Pipeline& p) {
  const json& byte_level = *p.pre_tokenizers.back();
  ASSIGN_OR_RETURN(bool prefix, BoolField(byte_level, "add_prefix_space", false));
  ASSIGN_OR_RETURN(bool use_regex, BoolField(byte_level, "use_regex", true));
  if (prefix) return Bad("ByteLevel add_prefix_space=true is not supported");
  if (!p.normalizers.empty()) {
    return Bad("a normalizer with a ByteLevel pre-tokenizer is not supported");
  }
  const size_t n = p.pre_tokenizers.size();
  if (n == 1 && use_regex) return PreTokenizerType::kGpt2;
  if (n == 2 && use_regex && p.pre_types[0] == "Digits") {
    ASSIGN_OR_RETURN(bool individual, BoolField(*p.pre_tokenizers[0], "individual_digits", false));
    if (!individual) return Bad("Digits without individual_digits is not supported");
    return PreTokenizerType::kDigitsGpt2;
  }
  if (n == 2 && !use_regex && p.pre_types[0] == "Split") {
    ASSIGN_OR_RETURN(std::string regex, SplitRegex(*p.pre_tokenizers[0]));
    if (regex == kLlama3Regex) return PreTokenizerType::kLlama3;
    if (regex == kQwen2Regex) return PreTokenizerType::kQwen2;
    return Bad(absl::StrCat("unsupported Split regex '", regex, "'"));
  }
  return Bad("unsupported pre_tokenizer sequence ending in ByteLevel");
}

// Every decoder is ByteLevel.
absl::Status CheckDecoders(const Pipeline& p) {
  for (const json* d : p.decoders) {
    ASSIGN_OR_RETURN(std::string type, TypeOf(*d));
    if (type != "ByteLevel") return Bad(absl::StrCat("unsupported decoder '", type, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const Pipeline& pipeline, const json& model,
                                                   std::shared_ptr<const Vocab> vocab,
                                                   const std::vector<MergeRule>& merges) {
  ASSIGN_OR_RETURN(PreTokenizerType pre_type, RecognisePreTokenizer(pipeline));
  RETURN_IF_ERROR(CheckDecoders(pipeline));
  ASSIGN_OR_RETURN(bool ignore_merges, BoolField(model, "ignore_merges", false));
  return NewByteLevelBpe(std::move(vocab), merges, pre_type, ignore_merges);
}

absl::StatusOr<std::unique_ptr<BpeModel>> FromGguf(const GgufFile& gguf,
                                                   std::shared_ptr<const Vocab> vocab) {
  using tokenizer_gguf::Optional;
  using tokenizer_gguf::Required;
  ASSIGN_OR_RETURN(std::vector<std::string> lines,
                   Required(gguf.GetStringArray("tokenizer.ggml.merges"), "tokenizer.ggml.merges"));
  ASSIGN_OR_RETURN(std::vector<MergeRule> merges, ParseMergeLines(lines));
  ASSIGN_OR_RETURN(std::string pre,
                   Optional<std::string>(gguf.GetString("tokenizer.ggml.pre"), "gpt2"));
  ASSIGN_OR_RETURN(PreTokenizerType pre_type, PreTokenizerTypeFromName(pre));
  // llama.cpp's Llama 3 ("llama-bpe") emits a piece that is itself a token whole.
  return NewByteLevelBpe(std::move(vocab), merges, pre_type, pre == "llama-bpe");
}

}  // namespace

const TokenizerKindLoaders& ByteLevelLoaders() {
  static const TokenizerKindLoaders kLoaders{TokenizerKind::kByteLevel, "gpt2",
                                             /*gguf_adds_bos=*/false, &FromJson, &FromGguf};
  return kLoaders;
}

}  // namespace tpserve::model
