#include "server/grammar/compiled_grammar.h"

#include "absl/strings/str_cat.h"
#include "server/grammar/json_schema_to_gbnf.h"
#include "server/grammar/regex_to_gbnf.h"

namespace tpserve::grammar {

absl::string_view KindField(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kJsonSchema:
      return "structured_output.json_schema";
    case GrammarKind::kRegex:
      return "structured_output.regex";
    case GrammarKind::kGbnf:
      return "structured_output.grammar";
    case GrammarKind::kJsonObject:
      return "structured_output.json_object";
  }
  return "structured_output";
}

std::shared_ptr<const TokenBitmask> CompiledGrammar::Mask(const Matcher& matcher,
                                                          absl::Time deadline) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = masks_.find(matcher.stacks());
    if (it != masks_.end()) return it->second;
  }
  auto mask = std::make_shared<TokenBitmask>();
  if (!trie_->Mask(matcher, mask.get(), deadline)) return nullptr;
  absl::MutexLock lock(&mu_);
  if (masks_.size() >= kMaxCachedMasks) masks_.clear();
  masks_.emplace(matcher.stacks(), mask);
  return mask;
}

absl::StatusOr<std::string> GrammarCache::ToGbnf(GrammarKind kind, absl::string_view text) {
  switch (kind) {
    case GrammarKind::kJsonSchema:
      return JsonSchemaToGbnf(text);
    case GrammarKind::kRegex:
      return RegexToGbnf(text, "root");
    case GrammarKind::kGbnf:
      return absl::StrCat(text);
    case GrammarKind::kJsonObject:
      return JsonObjectGbnf();
  }
  return absl::InvalidArgumentError("structured_output: unknown kind");
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::Get(GrammarKind kind,
                                                                         absl::string_view text) {
  Key key{kind, kind == GrammarKind::kJsonObject ? "" : absl::StrCat(text)};
  {
    absl::MutexLock lock(&mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
      }
    }
  }
  if (text.size() > static_cast<size_t>(options_.limits.max_text_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(KindField(kind), ": ", text.size(),
                                                   " bytes exceeds the limit of ",
                                                   options_.limits.max_text_bytes));
  }
  absl::StatusOr<std::string> gbnf = ToGbnf(kind, text);
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar =
      gbnf.ok() ? CompileGbnf(*gbnf, options_.limits) : gbnf.status();
  if (!grammar.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(KindField(kind), ": ", grammar.status().message()));
  }
  auto compiled = std::make_shared<const CompiledGrammar>(*std::move(grammar), trie_);
  absl::MutexLock lock(&mu_);
  lru_.emplace_front(std::move(key), compiled);
  if (lru_.size() > options_.max_entries) lru_.pop_back();
  return compiled;
}

}  // namespace tpserve::grammar
