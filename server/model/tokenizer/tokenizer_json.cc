// Tokenizer::FromJson: a Hugging Face tokenizer.json whose model is BPE. The vocabulary,
// merges, special tokens and chat template are read here; the normalizer, pre-tokenizer and
// decoder pick the TokenizerKind, whose own file recognises them in full and builds the
// BpeModel (tokenizer_kind.h). Anything unsupported is an error naming it.
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/tokenizer/tokenizer.h"
#include "server/model/tokenizer/tokenizer_json_fields.h"
#include "server/model/tokenizer/tokenizer_kind.h"

namespace tpserve::model {
namespace {

using tokenizer_json::Bad;
using tokenizer_json::BoolField;
using tokenizer_json::Flatten;
using tokenizer_json::json;
using tokenizer_json::Pipeline;
using tokenizer_json::StringField;
using tokenizer_json::TypeOf;

// tokenizer_config.json's text (empty: none) as an object.
absl::StatusOr<json> ParseConfig(std::string_view config_text) {
  if (config_text.empty()) return json::object();
  json config = json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("tokenizer_config.json is not a JSON object");
  }
  return config;
}

// The "model" object, when it is a BPE model without options we do not support.
absl::StatusOr<const json*> BpeModelObject(const json& root) {
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
  return &model;
}

// Token strings by id, placed by the model's vocab and then the added tokens (ids past it);
// an id placed twice keeps its first string. Every id up to the largest must be placed.
class VocabBuilder {
 public:
  absl::Status Place(int64_t id, const std::string& text) {
    if (id < 0 || id > (1 << 24)) return Bad(absl::StrCat("token id ", id, " is out of range"));
    if (static_cast<size_t>(id) >= tokens_.size()) {
      tokens_.resize(id + 1);
      present_.resize(id + 1, false);
    }
    if (!present_[id]) tokens_[id] = text;
    present_[id] = true;
    return absl::OkStatus();
  }

  // The tokens, [vocab_size]; an error when an id is missing or there are none.
  absl::StatusOr<std::vector<std::string>> Finish() && {
    for (size_t i = 0; i < present_.size(); ++i) {
      if (!present_[i]) return Bad(absl::StrCat("no token has id ", i));
    }
    if (tokens_.empty()) return Bad("empty vocabulary");
    return std::move(tokens_);
  }

 private:
  std::vector<std::string> tokens_;
  std::vector<bool> present_;  // [tokens_.size()]
};

absl::Status ReadModelVocab(const json& model, VocabBuilder* builder) {
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) return Bad("model has no vocab object");
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it.value().is_number_integer()) return Bad(absl::StrCat("vocab '", it.key(), "'"));
    RETURN_IF_ERROR(builder->Place(it.value().get<int64_t>(), it.key()));
  }
  return absl::OkStatus();
}

// One entry of "added_tokens".
absl::StatusOr<AddedToken> ReadAddedToken(const json& a) {
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
  return t;
}

absl::Status ReadAddedTokens(const json& root, VocabBuilder* builder,
                             std::vector<AddedToken>* added) {
  auto added_it = root.find("added_tokens");
  if (added_it == root.end() || added_it->is_null()) return absl::OkStatus();
  if (!added_it->is_array()) return Bad("added_tokens is not an array");
  for (const json& a : *added_it) {
    ASSIGN_OR_RETURN(AddedToken t, ReadAddedToken(a));
    RETURN_IF_ERROR(builder->Place(t.id, t.content));
    added->push_back(std::move(t));
  }
  return absl::OkStatus();
}

// The vocabulary: the model's, plus added tokens (appended to `added`) with ids past it.
absl::StatusOr<std::shared_ptr<Vocab>> ReadVocab(const json& root, const json& model,
                                                 std::vector<AddedToken>* added) {
  VocabBuilder builder;
  RETURN_IF_ERROR(ReadModelVocab(model, &builder));
  RETURN_IF_ERROR(ReadAddedTokens(root, &builder, added));
  ASSIGN_OR_RETURN(std::vector<std::string> tokens, std::move(builder).Finish());
  ASSIGN_OR_RETURN(std::string unk, StringField(model, "unk_token", ""));
  auto vocab = Vocab::FromTokens(std::move(tokens), -1);
  if (!unk.empty()) {
    vocab->unk_id = vocab->Find(unk);
    if (vocab->unk_id < 0) return Bad(absl::StrCat("unk_token '", unk, "' is not in the vocab"));
  }
  return vocab;
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

// A TemplateProcessing post-processor: the special tokens of its "single" template before
// the sequence are BOS, those after it EOS, and encoding adds exactly those.
absl::Status ReadTemplateProcessing(const json& processor, const Vocab& vocab,
                                    TokenizerSpec* spec) {
  auto single = processor.find("single");
  if (single == processor.end() || !single->is_array()) return Bad("TemplateProcessing");
  spec->add_bos = spec->add_eos = false;
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
    const int32_t id = vocab.Find(name);
    if (id < 0) return Bad(absl::StrCat("TemplateProcessing token '", name, "'"));
    if (seen_sequence) {
      spec->eos_id = id;
      spec->add_eos = true;
    } else {
      spec->bos_id = id;
      spec->add_bos = true;
    }
  }
  return absl::OkStatus();
}

// BOS/EOS: tokenizer_config.json names them; a TemplateProcessing post-processor says
// whether encoding adds them (else the config's add_bos_token / add_eos_token).
absl::Status ReadSpecialTokens(const json& root, const json& config, const Vocab& vocab,
                               TokenizerSpec* spec) {
  spec->bos_id = vocab.Find(TokenText(config, "bos_token"));
  spec->eos_id = vocab.Find(TokenText(config, "eos_token"));
  ASSIGN_OR_RETURN(spec->add_bos, BoolField(config, "add_bos_token", false));
  ASSIGN_OR_RETURN(spec->add_eos, BoolField(config, "add_eos_token", false));
  auto post = root.find("post_processor");
  if (post == root.end() || post->is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<const json*> procs, Flatten(*post, "processors"));
  for (const json* p : procs) {
    ASSIGN_OR_RETURN(std::string type, TypeOf(*p));
    if (type == "ByteLevel") continue;
    if (type != "TemplateProcessing") {
      return Bad(absl::StrCat("unsupported post_processor '", type, "'"));
    }
    RETURN_IF_ERROR(ReadTemplateProcessing(*p, vocab, spec));
  }
  return absl::OkStatus();
}

// The config's chat_template: a string, or the "default" of a [{name, template}, ...] list;
// empty when neither.
std::string ChatTemplate(const json& config) {
  std::string chat_template;
  auto tmpl = config.find("chat_template");
  if (tmpl != config.end() && tmpl->is_string()) {
    chat_template = tmpl->get<std::string>();
  } else if (tmpl != config.end() && tmpl->is_array()) {
    for (const json& t : *tmpl) {
      if (!t.is_object()) continue;
      auto name = t.find("name"), text = t.find("template");
      if (name != t.end() && *name == "default" && text != t.end() && text->is_string()) {
        chat_template = text->get<std::string>();
      }
    }
  }
  return chat_template;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text) {
  return FromJsonWithConfig(json_text, "");
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonWithConfig(
    std::string_view json_text, std::string_view config_text) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return Bad("not a JSON object");
  ASSIGN_OR_RETURN(const json config, ParseConfig(config_text));
  ASSIGN_OR_RETURN(const json* model, BpeModelObject(root));
  TokenizerSpec spec;
  ASSIGN_OR_RETURN(std::shared_ptr<const Vocab> vocab, ReadVocab(root, *model, &spec.added_tokens));
  spec.vocab = vocab;
  ASSIGN_OR_RETURN(std::vector<MergeRule> merges, ParseMerges(*model));
  ASSIGN_OR_RETURN(Pipeline pipeline, tokenizer_json::ReadPipeline(root));
  const TokenizerKindLoaders& kind = LoadersOf(KindOfJson(pipeline));
  ASSIGN_OR_RETURN(spec.model, kind.from_json(pipeline, *model, vocab, merges));
  RETURN_IF_ERROR(ReadSpecialTokens(root, config, *vocab, &spec));
  spec.chat_template = ChatTemplate(config);
  return Create(std::move(spec));
}

}  // namespace tpserve::model
