// Gbnf: grammar text (the GBNF dialect of llama.cpp) compiled into a byte-level grammar.
//
// The dialect:
//   root ::= item*               a rule; matching starts at `root`
//   name                          [a-zA-Z0-9_-]+, a reference to a rule
//   "text"                        a literal (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH;
//                                 any other UTF-8 as is)
//   [a-z0-9_] [^"\\]              a class of Unicode code points (ranges, negation; the same
//                                 escapes and \] \[ \- \^), matched as their UTF-8 bytes
//   .                             any code point
//   ( a | b )                     grouping and alternatives; an empty alternative is allowed
//   x*  x+  x?  x{m}  x{m,}  x{m,n}   repetition
//   # to the end of the line      a comment
// A rule runs on over lines until the next `name ::=`.
//
// The compiled form: rules of alternatives, each a sequence of elements, each a byte range
// or a rule reference. Classes become alternatives of byte-range sequences (UTF-8 split by
// lead byte), repetitions helper rules (tail-recursive, so matching them does not grow the
// stack). A grammar is refused (InvalidArgument naming the rule) when a rule is undefined,
// left-recursive (directly or not), or when it is past the bounds: `max_rules` rules or
// `max_elements` elements after expansion.
#ifndef TPSERVE_SERVER_GRAMMAR_GBNF_H_
#define TPSERVE_SERVER_GRAMMAR_GBNF_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve::grammar {

// One element of a sequence: bytes lo..hi (inclusive), or rule `rule`.
struct Element {
  enum class Kind : uint8_t { kBytes, kRule, kEnd };  // kEnd closes each alternative
  Kind kind = Kind::kEnd;
  uint8_t lo = 0;
  uint8_t hi = 0;
  int32_t rule = -1;
};

// A compiled grammar: `elements` holds every alternative of every rule, each closed by a
// kEnd; rule r's alternatives start at alternatives[r][i] (indices into `elements`).
struct Grammar {
  std::vector<Element> elements;
  std::vector<std::vector<int32_t>> alternatives;  // [rule][alternative] -> first element
  std::vector<std::string> rule_names;
  int32_t root = 0;
};

struct GrammarLimits {
  int32_t max_rules = 20000;
  int32_t max_elements = 400000;
  int32_t max_text_bytes = 1 << 20;
};

// Compiles GBNF `text` whose start rule is `root_rule`.
absl::StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(absl::string_view text,
                                                           const GrammarLimits& limits = {},
                                                           absl::string_view root_rule = "root");

// GBNF `text` with every rule name (defined or referred to) prefixed by `prefix`: for putting
// several front ends' grammars (each with its own `root`) into one.
std::string PrefixRuleNames(absl::string_view text, absl::string_view prefix);

// `s` as a GBNF literal, quotes included ("a\"b" for a"b): for front ends writing grammars.
std::string GbnfLiteral(absl::string_view s);

}  // namespace tpserve::grammar

#endif  // TPSERVE_SERVER_GRAMMAR_GBNF_H_
