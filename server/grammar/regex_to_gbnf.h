// RegexToGbnf: a regular expression as GBNF rules (gbnf.h) matching exactly its language.
//
// The syntax is the common subset of ECMAScript / Python / RE2 that constrained decoding
// uses: literals, `.`, classes [..] [^..] with ranges, escapes \d \w \s \D \W \S \n \t \r
// \\ \. (any escaped punctuation) \xHH \uHHHH, groups ( ) (?: ) (named groups (?P<n> ) and
// (?<n> ) as plain groups), alternation |, quantifiers * + ? {m} {m,} {m,n} (lazy forms `*?`
// taken as the greedy ones: the language is the same), anchors ^ at the very start and $ at
// the very end (the match is always whole). Backreferences, lookaround, and anchors
// elsewhere cannot be expressed as a grammar and are refused (InvalidArgument naming the
// construct and its offset), as is a repetition bound past `max_repeat`.
//
// With `json_string` set, the regex constrains the contents of a JSON string (JSON schema's
// `pattern`): each character it matches is written as JSON writes it inside quotes (`"` as
// \", `\` as \\, control characters as \n \t \uXXXX ...), and `.` / negated classes never
// produce an unescaped `"`, `\` or control character.
#ifndef TPSERVE_SERVER_GRAMMAR_REGEX_TO_GBNF_H_
#define TPSERVE_SERVER_GRAMMAR_REGEX_TO_GBNF_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve::grammar {

struct RegexOptions {
  bool json_string = false;
  int max_repeat = 1000;
};

// GBNF text defining rule `rule` (and helper rules named `rule` + "-" + suffix) for `regex`.
absl::StatusOr<std::string> RegexToGbnf(absl::string_view regex, absl::string_view rule,
                                        const RegexOptions& options = {});

}  // namespace tpserve::grammar

#endif  // TPSERVE_SERVER_GRAMMAR_REGEX_TO_GBNF_H_
