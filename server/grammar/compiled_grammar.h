// CompiledGrammar: a grammar ready to constrain decoding — the compiled rules, the
// vocabulary's trie, and a cache of token masks keyed by the matcher's stacks (a grammar's
// states repeat: every character inside a JSON string leaves the same stacks, so the mask
// walk runs once for them all). Shared, read-mostly, thread-safe.
//
// GrammarCache: structured-output requests as CompiledGrammars, compiled once per distinct
// (kind, text) and kept (least recently used first out). The front ends write GBNF
// (json_schema_to_gbnf.h, regex_to_gbnf.h) and one compiler builds every grammar (gbnf.h).
#ifndef TPSERVE_SERVER_GRAMMAR_COMPILED_GRAMMAR_H_
#define TPSERVE_SERVER_GRAMMAR_COMPILED_GRAMMAR_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/grammar/gbnf.h"
#include "server/grammar/matcher.h"
#include "server/grammar/token_mask.h"

namespace tpserve::grammar {

// What a request constrains its output to.
enum class GrammarKind { kJsonSchema, kRegex, kGbnf, kJsonObject };

// The field a kind comes from in GenerateRequest.structured_output, for messages.
absl::string_view KindField(GrammarKind kind);

class CompiledGrammar {
 public:
  CompiledGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie)
      : grammar_(std::move(grammar)), trie_(std::move(trie)) {}

  const std::shared_ptr<const Grammar>& grammar() const { return grammar_; }
  const TokenTrie& trie() const { return *trie_; }

  // The mask for `matcher`'s state (cached); null when computing it took past `deadline`.
  std::shared_ptr<const TokenBitmask> Mask(const Matcher& matcher, absl::Time deadline) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr size_t kMaxCachedMasks = 2048;

  const std::shared_ptr<const Grammar> grammar_;
  const std::shared_ptr<const TokenTrie> trie_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::vector<Stack>, std::shared_ptr<const TokenBitmask>> masks_
      ABSL_GUARDED_BY(mu_);
};

struct GrammarCacheOptions {
  GrammarLimits limits;
  size_t max_entries = 64;
};

class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const TokenTrie> trie, GrammarCacheOptions options = {})
      : trie_(std::move(trie)), options_(options) {}

  // The compiled grammar of `text` (json_object: ignored); InvalidArgument naming the field
  // (structured_output.<kind>) and, for a schema, the keyword's JSON pointer.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Get(GrammarKind kind,
                                                             absl::string_view text)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The GBNF a request's kind and text become (what Get compiles).
  static absl::StatusOr<std::string> ToGbnf(GrammarKind kind, absl::string_view text);

 private:
  using Key = std::pair<GrammarKind, std::string>;

  const std::shared_ptr<const TokenTrie> trie_;
  const GrammarCacheOptions options_;
  absl::Mutex mu_;
  std::list<std::pair<Key, std::shared_ptr<const CompiledGrammar>>> lru_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve::grammar

#endif  // TPSERVE_SERVER_GRAMMAR_COMPILED_GRAMMAR_H_
