// Tokenizer::FromJson: a Hugging Face tokenizer.json whose model is BPE, recognised as
// byte-level BPE (ByteLevel pre-tokenizer/decoder) or SentencePiece-style BPE (Prepend +
// Replace normalizer or Metaspace, byte fallback). Anything else is an error naming it.
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/tokenizer/tokenizer.h"

namespace tpserve::model {
namespace {

using json = nlohmann::json;

constexpr char kSpm[] = "\xE2\x96\x81";  // "▁"
constexpr char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", std::string(what)));
}

// Typed field access that never throws: absent or null gives `fallback`, a wrong type is an
// error naming the field.
absl::StatusOr<bool> BoolField(const json& obj, const char* key, bool fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Bad(absl::StrCat("'", key, "' is not a boolean"));
  return it->get<bool>();
}

absl::StatusOr<std::string> StringField(const json& obj, const char* key, std::string fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) return Bad(absl::StrCat("'", key, "' is not a string"));
  return it->get<std::string>();
}

// The "type" of a component object ("" for null).
absl::StatusOr<std::string> TypeOf(const json& component) {
  if (component.is_null()) return std::string();
  if (!component.is_object()) return Bad("a component is not an object");
  return StringField(component, "type", "");
}

// A component, or the members of a "Sequence" component, as a flat list.
absl::StatusOr<std::vector<const json*>> Flatten(const json& component, const char* list_key) {
  std::vector<const json*> out;
  ASSIGN_OR_RETURN(std::string type, TypeOf(component));
  if (type.empty()) return out;
  if (type != "Sequence") {
    out.push_back(&component);
    return out;
  }
  auto it = component.find(list_key);
  if (it == component.end() || !it->is_array()) return Bad("Sequence without a list");
  for (const json& member : *it) {
    ASSIGN_OR_RETURN(std::vector<const json*> inner, Flatten(member, list_key));
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

// What the normalizer, pre-tokenizer and decoder together say about the model.
struct Recognised {
  bool byte_level = false;
  std::string pre_type;  // byte-level
  SentencePieceOptions spm;
};

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

absl::StatusOr<Recognised> Recognise(const json& root) {
  Recognised r;
  const json null_json;
  auto part = [&](const char* key) -> const json& {
    auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  ASSIGN_OR_RETURN(std::vector<const json*> pre, Flatten(part("pre_tokenizer"), "pretokenizers"));
  ASSIGN_OR_RETURN(std::vector<const json*> norm, Flatten(part("normalizer"), "normalizers"));
  ASSIGN_OR_RETURN(std::vector<const json*> dec, Flatten(part("decoder"), "decoders"));
  std::vector<std::string> pre_types;
  for (const json* p : pre) {
    ASSIGN_OR_RETURN(std::string type, TypeOf(*p));
    pre_types.push_back(type);
  }
  // Byte-level: the last pre-tokenizer is ByteLevel.
  if (!pre_types.empty() && pre_types.back() == "ByteLevel") {
    r.byte_level = true;
    const json& bl = *pre.back();
    ASSIGN_OR_RETURN(bool prefix, BoolField(bl, "add_prefix_space", false));
    ASSIGN_OR_RETURN(bool use_regex, BoolField(bl, "use_regex", true));
    if (prefix) return Bad("ByteLevel add_prefix_space=true is not supported");
    if (!norm.empty()) return Bad("a normalizer with a ByteLevel pre-tokenizer is not supported");
    if (pre.size() == 1 && use_regex) {
      r.pre_type = "gpt2";
    } else if (pre.size() == 2 && use_regex && pre_types[0] == "Digits") {
      ASSIGN_OR_RETURN(bool individual, BoolField(*pre[0], "individual_digits", false));
      if (!individual) return Bad("Digits without individual_digits is not supported");
      r.pre_type = "smollm";
    } else if (pre.size() == 2 && !use_regex && pre_types[0] == "Split") {
      ASSIGN_OR_RETURN(std::string regex, SplitRegex(*pre[0]));
      if (regex == kLlama3Regex) {
        r.pre_type = "llama3";
      } else if (regex == kQwen2Regex) {
        r.pre_type = "qwen2";
      } else {
        return Bad(absl::StrCat("unsupported Split regex '", regex, "'"));
      }
    } else {
      return Bad("unsupported pre_tokenizer sequence ending in ByteLevel");
    }
    for (const json* d : dec) {
      ASSIGN_OR_RETURN(std::string type, TypeOf(*d));
      if (type != "ByteLevel") return Bad(absl::StrCat("unsupported decoder '", type, "'"));
    }
    return r;
  }
  // SentencePiece-style: Prepend("▁") + Replace(" ", "▁"), or a Metaspace pre-tokenizer.
  using Prepend = SentencePieceOptions::Prepend;
  r.spm.prepend = Prepend::kNever;
  r.spm.strip_leading_space = false;
  bool replaces_spaces = false;
  for (const json* n : norm) {
    ASSIGN_OR_RETURN(std::string type, TypeOf(*n));
    if (type == "Prepend") {
      ASSIGN_OR_RETURN(std::string what, StringField(*n, "prepend", ""));
      if (what != kSpm) return Bad(absl::StrCat("unsupported Prepend '", what, "'"));
      r.spm.prepend = Prepend::kAlways;
    } else if (type == "Replace") {
      auto pattern = n->find("pattern");
      std::string from;
      if (pattern != n->end() && pattern->is_object()) {
        ASSIGN_OR_RETURN(from, StringField(*pattern, "String", ""));
      }
      ASSIGN_OR_RETURN(std::string to, StringField(*n, "content", ""));
      if (from != " " || to != kSpm) return Bad("unsupported Replace normalizer");
      replaces_spaces = true;
    } else {
      return Bad(absl::StrCat("unsupported normalizer '", type, "'"));
    }
  }
  for (size_t i = 0; i < pre.size(); ++i) {
    if (pre_types[i] != "Metaspace") {
      return Bad(absl::StrCat("unsupported pre_tokenizer '", pre_types[i], "'"));
    }
    ASSIGN_OR_RETURN(std::string scheme, StringField(*pre[i], "prepend_scheme", "always"));
    ASSIGN_OR_RETURN(bool split, BoolField(*pre[i], "split", true));
    ASSIGN_OR_RETURN(std::string replacement, StringField(*pre[i], "replacement", kSpm));
    if (split || replacement != kSpm) return Bad("Metaspace must have split=false and '▁'");
    if (scheme == "always") {
      r.spm.prepend = Prepend::kAlways;
    } else if (scheme == "first") {
      r.spm.prepend = Prepend::kFirst;
    } else if (scheme != "never") {
      return Bad(absl::StrCat("unsupported Metaspace prepend_scheme '", scheme, "'"));
    }
    replaces_spaces = true;
  }
  if (!replaces_spaces) {
    return Bad("neither a ByteLevel nor a SentencePiece-style (▁) tokenizer");
  }
  for (const json* d : dec) {
    ASSIGN_OR_RETURN(std::string type, TypeOf(*d));
    if (type == "Strip") {
      ASSIGN_OR_RETURN(std::string content, StringField(*d, "content", " "));
      auto start = d->find("start");
      if (content != " " || start == d->end() || !start->is_number_integer() ||
          start->get<int64_t>() > 1) {
        return Bad("unsupported Strip decoder");
      }
      r.spm.strip_leading_space = start->get<int64_t>() == 1;
    } else if (type == "Metaspace") {
      ASSIGN_OR_RETURN(std::string scheme, StringField(*d, "prepend_scheme", "always"));
      r.spm.strip_leading_space = scheme != "never";
    } else if (type != "Replace" && type != "ByteFallback" && type != "Fuse") {
      return Bad(absl::StrCat("unsupported decoder '", type, "'"));
    }
  }
  return r;
}

absl::StatusOr<std::vector<MergeRule>> ParseMerges(const json& model) {
  auto it = model.find("merges");
  if (it == model.end() || !it->is_array()) return Bad("model has no merges array");
  std::vector<MergeRule> rules;
  rules.reserve(it->size());
  for (const json& m : *it) {
    if (m.is_string()) {  // "a b"
      ASSIGN_OR_RETURN(std::vector<MergeRule> one, ParseMergeLines({m.get<std::string>()}));
      rules.push_back(std::move(one[0]));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      rules.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return Bad("a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return rules;
}

// A token given as "text" or {"content": "text"} in tokenizer_config.json.
std::string TokenText(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text) {
  return FromJsonWithConfig(json_text, "");
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonWithConfig(
    std::string_view json_text, std::string_view config_text) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return Bad("not a JSON object");
  json config = json::object();
  if (!config_text.empty()) {
    config = json::parse(config_text, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError("tokenizer_config.json is not a JSON object");
    }
  }
  auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) return Bad("no model object");
  const json& model = *model_it;
  ASSIGN_OR_RETURN(std::string model_type, StringField(model, "type", "BPE"));
  if (model_type != "BPE") return Bad(absl::StrCat("unsupported model type '", model_type, "'"));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->empty())) {
      return Bad(absl::StrCat("BPE option '", key, "' is not supported"));
    }
  }

  // Vocabulary: the model's, plus added tokens with ids past it.
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) return Bad("model has no vocab object");
  std::vector<std::string> tokens;
  std::vector<bool> present;
  auto place = [&](int64_t id, const std::string& text) -> absl::Status {
    if (id < 0 || id > (1 << 24)) return Bad(absl::StrCat("token id ", id, " is out of range"));
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(id + 1);
      present.resize(id + 1, false);
    }
    if (!present[id]) tokens[id] = text;
    present[id] = true;
    return absl::OkStatus();
  };
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it.value().is_number_integer()) return Bad(absl::StrCat("vocab '", it.key(), "'"));
    RETURN_IF_ERROR(place(it.value().get<int64_t>(), it.key()));
  }
  TokenizerSpec spec;
  auto added_it = root.find("added_tokens");
  if (added_it != root.end() && !added_it->is_null()) {
    if (!added_it->is_array()) return Bad("added_tokens is not an array");
    for (const json& a : *added_it) {
      if (!a.is_object()) return Bad("an added token is not an object");
      auto id = a.find("id");
      if (id == a.end() || !id->is_number_integer()) return Bad("an added token has no id");
      AddedToken t;
      t.id = static_cast<int32_t>(id->get<int64_t>());
      ASSIGN_OR_RETURN(t.content, StringField(a, "content", ""));
      ASSIGN_OR_RETURN(t.special, BoolField(a, "special", false));
      ASSIGN_OR_RETURN(t.lstrip, BoolField(a, "lstrip", false));
      ASSIGN_OR_RETURN(t.rstrip, BoolField(a, "rstrip", false));
      ASSIGN_OR_RETURN(bool single_word, BoolField(a, "single_word", false));
      if (single_word) return Bad(absl::StrCat("added token '", t.content, "': single_word"));
      RETURN_IF_ERROR(place(t.id, t.content));
      spec.added_tokens.push_back(std::move(t));
    }
  }
  for (size_t i = 0; i < present.size(); ++i) {
    if (!present[i]) return Bad(absl::StrCat("no token has id ", i));
  }
  if (tokens.empty()) return Bad("empty vocabulary");
  ASSIGN_OR_RETURN(std::string unk, StringField(model, "unk_token", ""));
  auto vocab = Vocab::FromTokens(std::move(tokens), -1);
  if (!unk.empty()) {
    vocab->unk_id = vocab->Find(unk);
    if (vocab->unk_id < 0) return Bad(absl::StrCat("unk_token '", unk, "' is not in the vocab"));
  }
  spec.vocab = vocab;

  ASSIGN_OR_RETURN(std::vector<MergeRule> merges, ParseMerges(model));
  ASSIGN_OR_RETURN(Recognised rec, Recognise(root));
  ASSIGN_OR_RETURN(bool ignore_merges, BoolField(model, "ignore_merges", false));
  if (rec.byte_level) {
    ASSIGN_OR_RETURN(spec.model, NewByteLevelBpe(vocab, merges, rec.pre_type, ignore_merges));
  } else {
    if (ignore_merges) return Bad("ignore_merges with SentencePiece-style BPE");
    ASSIGN_OR_RETURN(rec.spm.byte_fallback, BoolField(model, "byte_fallback", false));
    ASSIGN_OR_RETURN(rec.spm.fuse_unk, BoolField(model, "fuse_unk", false));
    ASSIGN_OR_RETURN(spec.model, NewSentencePieceBpeWithMerges(vocab, merges, rec.spm));
  }

  // BOS/EOS: tokenizer_config.json names them; a TemplateProcessing post-processor says
  // whether encoding adds them (else the config's add_bos_token / add_eos_token).
  spec.bos_id = vocab->Find(TokenText(config, "bos_token"));
  spec.eos_id = vocab->Find(TokenText(config, "eos_token"));
  ASSIGN_OR_RETURN(spec.add_bos, BoolField(config, "add_bos_token", false));
  ASSIGN_OR_RETURN(spec.add_eos, BoolField(config, "add_eos_token", false));
  auto post = root.find("post_processor");
  if (post != root.end() && !post->is_null()) {
    ASSIGN_OR_RETURN(std::vector<const json*> procs, Flatten(*post, "processors"));
    for (const json* p : procs) {
      ASSIGN_OR_RETURN(std::string type, TypeOf(*p));
      if (type == "ByteLevel") continue;
      if (type != "TemplateProcessing") {
        return Bad(absl::StrCat("unsupported post_processor '", type, "'"));
      }
      auto single = p->find("single");
      if (single == p->end() || !single->is_array()) return Bad("TemplateProcessing");
      spec.add_bos = spec.add_eos = false;
      bool seen_sequence = false;
      for (const json& piece : *single) {
        if (!piece.is_object()) return Bad("TemplateProcessing piece");
        if (piece.contains("Sequence")) {
          seen_sequence = true;
          continue;
        }
        auto special = piece.find("SpecialToken");
        if (special == piece.end() || !special->is_object()) return Bad("TemplateProcessing");
        ASSIGN_OR_RETURN(std::string name, StringField(*special, "id", ""));
        const int32_t id = vocab->Find(name);
        if (id < 0) return Bad(absl::StrCat("TemplateProcessing token '", name, "'"));
        if (seen_sequence) {
          spec.eos_id = id;
          spec.add_eos = true;
        } else {
          spec.bos_id = id;
          spec.add_bos = true;
        }
      }
    }
  }
  auto tmpl = config.find("chat_template");
  if (tmpl != config.end() && tmpl->is_string()) {
    spec.chat_template = tmpl->get<std::string>();
  } else if (tmpl != config.end() && tmpl->is_array()) {  // [{name, template}, ...]
    for (const json& t : *tmpl) {
      if (!t.is_object()) continue;
      auto name = t.find("name"), text = t.find("template");
      if (name != t.end() && *name == "default" && text != t.end() && text->is_string()) {
        spec.chat_template = text->get<std::string>();
      }
    }
  }
  return Create(std::move(spec));
}

}  // namespace tpserve::model
