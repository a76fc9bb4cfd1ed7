#include "server/model/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tpserve::model {
namespace {

// Hugging Face's regexes run on Oniguruma, whose \s is Unicode White_Space; PCRE2's \s with
// UCP lacks U+0085 (NEL), so it is spelt out as [\s\x{85}] (and \S as [^\s\x{85}]).
constexpr char kGpt2[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\x{85}\p{L}\p{N}]+)"
                         R"(|[\s\x{85}]+(?![^\s\x{85}])|[\s\x{85}]+)";
constexpr char kDigits[] = R"(\p{N})";
constexpr char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\x{85}\p{L}\p{N}]+[\r\n]*|[\s\x{85}]*[\r\n]+|[\s\x{85}]+(?![^\s\x{85}])|[\s\x{85}]+)";
constexpr char kQwen2[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\x{85}\p{L}\p{N}]+[\r\n]*|[\s\x{85}]*[\r\n]+|[\s\x{85}]+(?![^\s\x{85}])|[\s\x{85}]+)";

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<PreTokenizerType> PreTokenizerTypeFromName(std::string_view name) {
  if (name == "gpt2") return PreTokenizerType::kGpt2;
  if (name == "smollm" || name == "starcoder" || name == "refact") {
    return PreTokenizerType::kDigitsGpt2;
  }
  if (name == "llama-bpe" || name == "llama3") return PreTokenizerType::kLlama3;
  if (name == "qwen2") return PreTokenizerType::kQwen2;
  if (name == "none") return PreTokenizerType::kNone;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported pre-tokenizer type '", std::string(name), "'"));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(PreTokenizerType type) {
  std::vector<const char*> patterns;
  switch (type) {
    case PreTokenizerType::kNone:
      break;
    case PreTokenizerType::kGpt2:
      patterns = {kGpt2};
      break;
    case PreTokenizerType::kDigitsGpt2:
      patterns = {kDigits, kGpt2};
      break;
    case PreTokenizerType::kLlama3:
      patterns = {kLlama3};
      break;
    case PreTokenizerType::kQwen2:
      patterns = {kQwen2};
      break;
  }
  auto pre = std::unique_ptr<PreTokenizer>(new PreTokenizer());
  pre->type_ = type;
  for (const char* pattern : patterns) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    auto regex = std::make_unique<Regex>();
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (regex->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return absl::InternalError(absl::StrCat("pre-tokenizer regex does not compile at ", offset,
                                              ": ", reinterpret_cast<const char*>(message)));
    }
    // Without JIT (unsupported platform) pcre2_match still works, only slower.
    pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    pre->regexes_.push_back(std::move(regex));
  }
  return pre;
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* pieces) const {
  if (text.empty()) return;
  const size_t first = pieces->size();
  pieces->push_back(text);
  std::vector<std::string_view> next;
  for (const auto& regex : regexes_) {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    next.clear();
    for (size_t p = first; p < pieces->size(); ++p) {
      const std::string_view piece = (*pieces)[p];
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t start = 0;  // where the next gap begins
      size_t search = 0;
      while (search < piece.size()) {
        const int rc = pcre2_match(regex->code, subject, piece.size(), search, PCRE2_NO_UTF_CHECK,
                                   match, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
        const size_t begin = ov[0], end = ov[1];
        if (end == begin) {  // none of our patterns match empty; step one character if one does
          search = begin + 1;
          while (search < piece.size() && (static_cast<uint8_t>(piece[search]) & 0xC0) == 0x80) {
            ++search;
          }
          continue;
        }
        if (begin > start) next.push_back(piece.substr(start, begin - start));
        next.push_back(piece.substr(begin, end - begin));
        start = search = end;
      }
      if (start < piece.size()) next.push_back(piece.substr(start));
    }
    pcre2_match_data_free(match);
    pieces->resize(first);
    pieces->insert(pieces->end(), next.begin(), next.end());
  }
}

}  // namespace tpserve::model
