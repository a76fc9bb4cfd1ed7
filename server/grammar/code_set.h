// CodeSet: a set of Unicode code points as sorted, disjoint, non-adjacent inclusive ranges,
// never holding a surrogate; the character classes of the regex front end (regex_to_gbnf.h).
#ifndef TPSERVE_SERVER_GRAMMAR_CODE_SET_H_
#define TPSERVE_SERVER_GRAMMAR_CODE_SET_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace tpserve::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;

using Range = std::pair<uint32_t, uint32_t>;
using CodeSet = std::vector<Range>;

inline bool IsSurrogate(uint32_t cp) { return cp >= kSurrogateLo && cp <= kSurrogateHi; }

// `ranges` (any order, overlapping or not) in the normal form above, surrogates dropped.
CodeSet Normalize(CodeSet ranges);
// Every code point (surrogates aside) not in `s`.
CodeSet Negate(const CodeSet& s);
CodeSet Intersect(const CodeSet& a, const CodeSet& b);
bool Contains(const CodeSet& s, uint32_t cp);
inline CodeSet Single(uint32_t cp) { return {{cp, cp}}; }

// The sets of the escapes \d \w \s (ASCII meanings).
CodeSet Digits();
CodeSet WordChars();
CodeSet Spaces();  // \t \n \v \f \r and space

}  // namespace tpserve::grammar

#endif  // TPSERVE_SERVER_GRAMMAR_CODE_SET_H_
