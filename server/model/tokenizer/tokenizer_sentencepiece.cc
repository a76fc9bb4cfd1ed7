// TokenizerKind::kSentencePiece: SentencePiece-style BPE (Llama 2, Mistral), recognised in a
// tokenizer.json by Prepend("▁") + Replace(" ", "▁") normalizers or a Metaspace
// pre-tokenizer (merges by rank, byte fallback), and in GGUF by tokenizer.ggml.model "llama"
// with tokenizer.ggml.scores (merges by score).
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
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
using Prepend = SentencePieceOptions::Prepend;

constexpr char kSpm[] = "\xE2\x96\x81";  // "▁"

// Prepend("▁") (sets options->prepend) and Replace(" ", "▁") normalizers; any other is an
// error. `replaces_spaces`: whether one of them turns spaces into "▁".
absl::Status ReadNormalizers(const Pipeline& p, SentencePieceOptions* options,
                             bool* replaces_spaces) {
  for (const json* n : p.normalizers) {
    ASSIGN_OR_RETURN(std::string type, TypeOf(*n));
    if (type == "Prepend") {
      ASSIGN_OR_RETURN(std::string what, StringField(*n, "prepend", ""));
      if (what != kSpm) return Bad(absl::StrCat("unsupported Prepend '", what, "'"));
      options->prepend = Prepend::kAlways;
    } else if (type == "Replace") {
      auto pattern = n->find("pattern");
      std::string from;
      if (pattern != n->end() && pattern->is_object()) {
        ASSIGN_OR_RETURN(from, StringField(*pattern, "String", ""));
      }
      ASSIGN_OR_RETURN(std::string to, StringField(*n, "content", ""));
      if (from != " " || to != kSpm) return Bad("unsupported Replace normalizer");
      *replaces_spaces = true;
    } else {
      return Bad(absl::StrCat("unsupported normalizer '", type, "'"));
    }
  }
  return absl::OkStatus();
}

// Metaspace pre-tokenizers (split=false, "▁"): their prepend_scheme sets options->prepend.
// Any other pre-tokenizer is an error.
absl::Status ReadPreTokenizers(const Pipeline& p, SentencePieceOptions* options,
                               bool* replaces_spaces) {
  for (size_t i = 0; i < p.pre_tokenizers.size(); ++i) {
    if (p.pre_types[i] != "Metaspace") {
      return Bad(absl::StrCat("unsupported pre_tokenizer '", p.pre_types[i], "'"));
    }
    const json& metaspace = *p.pre_tokenizers[i];
    ASSIGN_OR_RETURN(std::string scheme, StringField(metaspace, "prepend_scheme", "always"));
    ASSIGN_OR_RETURN(bool split, BoolField(metaspace, "split", true));
    ASSIGN_OR_RETURN(std::string replacement, StringField(metaspace, "replacement", kSpm));
    if (split || replacement != kSpm) return Bad("Metaspace must have split=false and '▁'");
    if (scheme == "always") {
      options->prepend = Prepend::kAlways;
    } else if (scheme == "first") {
      options->prepend = Prepend::kFirst;
    } else if (scheme != "never") {
      return Bad(absl::StrCat("unsupported Metaspace prepend_scheme '", scheme, "'"));
    }
    *replaces_spaces = true;
  }
  return absl::OkStatus();
}

// Strip and Metaspace decoders say whether decoding drops a leading space; Replace,
// ByteFallback and Fuse change nothing here. Any other decoder is an error.
absl::Status ReadDecoders(const Pipeline& p, SentencePieceOptions* options) {
  for (const json* d : p.decoders) {
    ASSIGN_OR_RETURN(std::string type, TypeOf(*d));
    if (type == "Strip") {
      ASSIGN_OR_RETURN(std::string content, StringField(*d, "content", " "));
      auto start = d->find("start");
      if (content != " " || start == d->end() || !start->is_number_integer() ||
          start->get<int64_t>() > 1) {
        return Bad("unsupported Strip decoder");
      }
      options->strip_leading_space = start->get<int64_t>() == 1;
    } else if (type == "Metaspace") {
      ASSIGN_OR_RETURN(std::string scheme, StringField(*d, "prepend_scheme", "always"));
      options->strip_leading_space = scheme != "never";
    } else if (type != "Replace" && type != "ByteFallback" && type != "Fuse") {
      return Bad(absl::StrCat("unsupported decoder '", type, "'"));
    }
  }
  return absl::OkStatus();
}

// The options the normalizer, pre-tokenizer and decoder say (byte_fallback and fuse_unk come
// from the model object).
absl::StatusOr<SentencePieceOptions> Recognise(const Pipeline& p) {
  SentencePieceOptions options;
  options.prepend = Prepend::kNever;
  options.strip_leading_space = false;
  bool replaces_spaces = false;
  RETURN_IF_ERROR(ReadNormalizers(p, &options, &replaces_spaces));
  RETURN_IF_ERROR(ReadPreTokenizers(p, &options, &replaces_spaces));
  if (!replaces_spaces) {
    return Bad("neither a ByteLevel nor a SentencePiece-style (▁) tokenizer");
  }
  RETURN_IF_ERROR(ReadDecoders(p, &options));
  return options;
}

absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const Pipeline& pipeline, const json& model,
                                                   std::shared_ptr<const Vocab> vocab,
                                                   const std::vector<MergeRule>& merges) {
  ASSIGN_OR_RETURN(SentencePieceOptions options, Recognise(pipeline));
  ASSIGN_OR_RETURN(bool ignore_merges, BoolField(model, "ignore_merges", false));
  if (ignore_merges) return Bad("ignore_merges with SentencePiece-style BPE");
  ASSIGN_OR_RETURN(options.byte_fallback, BoolField(model, "byte_fallback", false));
  ASSIGN_OR_RETURN(options.fuse_unk, BoolField(model, "fuse_unk", false));
  return NewSentencePieceBpeWithMerges(std::move(vocab), merges, options);
}

absl::StatusOr<std::unique_ptr<BpeModel>> FromGguf(const GgufFile& gguf,
                                                   std::shared_ptr<const Vocab> vocab) {
  using tokenizer_gguf::Optional;
  using tokenizer_gguf::Required;
  ASSIGN_OR_RETURN(std::vector<double> scores,
                   Required(gguf.GetFloatArray("tokenizer.ggml.scores"), "tokenizer.ggml.scores"));
  ASSIGN_OR_RETURN(bool prefix, Optional(gguf.GetBool("tokenizer.ggml.add_space_prefix"), true));
  SentencePieceOptions options;
  options.prepend = prefix ? Prepend::kAlways : Prepend::kNever;
  options.strip_leading_space = prefix;
  return NewSentencePieceBpeWithScores(std::move(vocab),
                                       std::vector<float>(scores.begin(), scores.end()), options);
}

}  // namespace

const TokenizerKindLoaders& SentencePieceLoaders() {
  static const TokenizerKindLoaders kLoaders{TokenizerKind::kSentencePiece, "llama",
                                             /*gguf_adds_bos=*/true, &FromJson, &FromGguf};
  return kLoaders;
}

}  // namespace tpserve::model
