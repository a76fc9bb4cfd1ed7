#include "server/grammar/regex_to_gbnf.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/grammar/code_set.h"
#include "server/grammar/gbnf.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::grammar {
namespace {

using ::tpserve::model::AppendUtf8;

constexpr int kMaxDepth = 100;               // regex groups; GBNF allows 200, our output adds a few
constexpr int64_t kUnbounded = -1;           // a repetition's max with no bound
constexpr int64_t kHuge = int64_t{1} << 40;  // repetition counts saturate here while parsed
constexpr size_t kInlineBytes = 40;          // a shared node's text this short is repeated
// The GBNF text of a class nothing matches: an empty language.
constexpr char kNothing[] = "[^\\x00-\\U0010FFFF]";

// The code point encoded at s[pos] into *cp, and its length in bytes; 0 where the bytes are
// not UTF-8 (truncated, overlong, a surrogate, past U+10FFFF).
int DecodeUtf8(absl::string_view s, size_t pos, uint32_t* cp) {
  const auto c = static_cast<unsigned char>(s[pos]);
  const int n = c < 0x80             ? 1
                : (c & 0xE0) == 0xC0 ? 2
                : (c & 0xF0) == 0xE0 ? 3
                : (c & 0xF8) == 0xF0 ? 4
                                     : 0;
  if (n == 0 || pos + n > s.size()) return 0;
  uint32_t v = n == 1 ? c : c & (0x7F >> n);
  for (int i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};  // by length: no overlong
  if (v < kMin[n] || v > kMaxCodePoint || IsSurrogate(v)) return 0;
  *cp = v;
  return n;
}

// The regex as an immutable graph of nodes: a subtree may be shared (rewriting a repetition
// of what may be empty reuses parts, see NonEmpty). The empty string is a kConcat of nothing,
// the empty language a kAlt of nothing; groups leave no node of their own.
struct Node;
using NodePtr = std::shared_ptr<const Node>;
struct Node {
  enum class Kind { kSet, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kConcat;
  CodeSet set;                // kSet: one code point of these
  std::vector<NodePtr> kids;  // kConcat, kAlt: the parts; kRepeat: the one repeated
  int64_t min = 0;            // kRepeat: bounds, max kUnbounded for none
  int64_t max = 0;
  bool nullable = false;  // whether it matches the empty string
};

NodePtr Make(Node::Kind kind, std::vector<NodePtr> kids = {}, int64_t min = 0, int64_t max = 0,
             CodeSet set = {}) {
  auto n = std::make_shared<Node>();
  n->kind = kind;
  n->kids = std::move(kids);
  n->min = min;
  n->max = max;
  n->set = std::move(set);
  const auto nullable = [](const NodePtr& k) { return k->nullable; };
  n->nullable = kind == Node::Kind::kConcat ? std::all_of(n->kids.begin(), n->kids.end(), nullable)
                : kind == Node::Kind::kAlt  ? std::any_of(n->kids.begin(), n->kids.end(), nullable)
                : kind == Node::Kind::kRepeat ? min == 0 || n->kids[0]->nullable
                                              : false;
  return n;
}

NodePtr SetNode(CodeSet set) { return Make(Node::Kind::kSet, {}, 0, 0, std::move(set)); }
NodePtr Epsilon() { return Make(Node::Kind::kConcat); }
NodePtr Nothing() { return Make(Node::Kind::kAlt); }
bool IsNothing(const Node& n) { return n.kind == Node::Kind::kAlt && n.kids.empty(); }

// A kConcat or kAlt of `parts`: nested ones of its kind spliced, one part left as itself; a
// concatenation with a part that matches nothing matching nothing.
NodePtr Join(Node::Kind kind, const std::vector<NodePtr>& parts) {
  std::vector<NodePtr> kids;
  for (const NodePtr& p : parts) {
    if (kind == Node::Kind::kConcat && IsNothing(*p)) return Nothing();
    if (p->kind == kind) {
      kids.insert(kids.end(), p->kids.begin(), p->kids.end());
    } else {
      kids.push_back(p);
    }
  }
  if (kids.size() == 1) return kids[0];
  return Make(kind, std::move(kids));
}

NodePtr RepeatOf(NodePtr x, int64_t min, int64_t max);

// `n` less the empty string: the same node when it cannot match it. Every repetition's body
// is already not nullable (RepeatOf), so this descends only through concatenations and
// alternatives of what may be empty, each once, and shares the parts it keeps.
NodePtr NonEmpty(const NodePtr& n) {
  if (!n->nullable) return n;
  switch (n->kind) {
    case Node::Kind::kSet:
      return n;
    case Node::Kind::kConcat: {  // all parts nullable: a b c = a' (b c) | b' (c) | c'
      std::vector<NodePtr> alts;
      NodePtr rest;  // the parts after the one made non-empty: a chain shared by the alternatives
      for (auto k = n->kids.rbegin(); k != n->kids.rend(); ++k) {
        alts.push_back(rest ? Make(Node::Kind::kConcat, {NonEmpty(*k), rest}) : NonEmpty(*k));
        rest = rest ? Make(Node::Kind::kConcat, {*k, rest}) : *k;
      }
      std::reverse(alts.begin(), alts.end());
      return Join(Node::Kind::kAlt, alts);
    }
    case Node::Kind::kAlt: {
      std::vector<NodePtr> alts;
      for (const NodePtr& k : n->kids) alts.push_back(NonEmpty(k));
      return Join(Node::Kind::kAlt, alts);
    }
    case Node::Kind::kRepeat:  // x{0,n} with x not nullable: x{1,n}
      return RepeatOf(n->kids[0], 1, n->max);
  }
  return n;
}

// x{min,max}. GBNF refuses a repetition of what may be empty (it would be left-recursive), so
// x{m,n} with nullable x is written x'{0,n}, x' being x less the empty string: the same
// language.
NodePtr RepeatOf(NodePtr x, int64_t min, int64_t max) {
  if (x->nullable) {
    x = NonEmpty(x);
    min = 0;
  }
  if (max == 0 || (IsNothing(*x) && min == 0)) return Epsilon();
  if (min == 1 && max == 1) return x;
  if (IsNothing(*x)) return x;
  return Make(Node::Kind::kRepeat, {std::move(x)}, min, max);
}

class Parser {
 public:
  Parser(absl::string_view re, const RegexOptions& options) : re_(re), options_(options) {}

  absl::StatusOr<NodePtr> Parse() {
    NodePtr root = Alternation(0);
    if (ok() && pos_ < re_.size()) Fail("an unbalanced ')'", pos_);  // all else is consumed
    if (!ok()) return error_;
    return root;
  }

 private:
  bool ok() const { return error_.ok(); }

  void Fail(absl::string_view what, size_t at) {
    if (!ok()) return;
    error_ = absl::InvalidArgumentError(absl::StrCat("regex: ", what, " at offset ", at));
  }

  bool At(absl::string_view s) const { return re_.substr(pos_, s.size()) == s; }

  NodePtr Alternation(int depth) {
    std::vector<NodePtr> alts = {Sequence(depth)};
    while (ok() && pos_ < re_.size() && re_[pos_] == '|') {
      ++pos_;
      alts.push_back(Sequence(depth));
    }
    return Join(Node::Kind::kAlt, alts);
  }

  NodePtr Sequence(int depth) {
    std::vector<NodePtr> parts;
    while (ok() && pos_ < re_.size() && re_[pos_] != '|' && re_[pos_] != ')') {
      NodePtr atom = Atom(depth);
      const size_t at = pos_;
      int64_t min = 0;
      int64_t max = 0;
      if (!ok() || !Quantifier(&min, &max)) {
        if (atom) parts.push_back(std::move(atom));
        continue;
      }
      const int64_t bound = std::max(min, max);
      if (!atom) {  // after ^ or $
        NothingToRepeat(at);
        break;
      }
      if (max != kUnbounded && min > max) {
        Fail("a repetition {m,n} with m > n", at);
      } else if (bound > options_.max_repeat) {
        Fail(absl::StrCat("a repetition bound ", bound, " past max_repeat ", options_.max_repeat),
             at);
      } else if (QuantifierLength(pos_) > 0) {
        NothingToRepeat(pos_);  // a quantifier after a quantifier
      }
      parts.push_back(RepeatOf(std::move(atom), min, max));
    }
    return Join(Node::Kind::kConcat, parts);
  }

  void NothingToRepeat(size_t at) {
    Fail(absl::StrCat("nothing to repeat for '", re_.substr(at, QuantifierLength(at)), "'"), at);
  }

  // The length of the quantifier (* + ? {m} {m,} {m,n}) at `at`, 0 if none is there. A `{`
  // that does not open one of those is a literal `{`, as in ECMAScript (without the u flag)
  // and Python; `{,n}` too is a literal, as in ECMAScript.
  size_t QuantifierLength(size_t at) const {
    if (at >= re_.size()) return 0;
    const char c = re_[at];
    if (c == '*' || c == '+' || c == '?') return 1;
    if (c != '{') return 0;
    const auto digits = [this](size_t i) {
      while (i < re_.size() && absl::ascii_isdigit(re_[i])) ++i;
      return i;
    };
    size_t i = digits(at + 1);
    if (i == at + 1) return 0;
    if (i < re_.size() && re_[i] == ',') i = digits(i + 1);
    return i < re_.size() && re_[i] == '}' ? i + 1 - at : 0;
  }

  // Takes a quantifier (and its lazy `?`, the same language) if one is here.
  bool Quantifier(int64_t* min, int64_t* max) {
    const size_t n = QuantifierLength(pos_);
    if (n == 0) return false;
    const char c = re_[pos_];
    *min = c == '+' ? 1 : 0;
    *max = c == '?' ? 1 : kUnbounded;
    if (c == '{') {
      size_t i = pos_ + 1;
      *min = Number(&i);
      *max = *min;
      if (re_[i] == ',') {
        ++i;
        *max = re_[i] == '}' ? kUnbounded : Number(&i);
      }
    }
    pos_ += n;
    if (pos_ < re_.size() && re_[pos_] == '?') ++pos_;
    return true;
  }

  int64_t Number(size_t* i) const {
    int64_t v = 0;
    while (*i < re_.size() && absl::ascii_isdigit(re_[*i])) {
      v = std::min(kHuge, v * 10 + (re_[(*i)++] - '0'));
    }
    return v;
  }

  // One atom; null for an anchor.
  NodePtr Atom(int depth) {
    const size_t at = pos_;
    const char c = re_[pos_];
    if (c == '^' || c == '$') {
      if ((c == '^' && at != 0) || (c == '$' && at + 1 != re_.size())) {
        Fail(absl::StrCat("an anchor ", std::string(1, c), " not at the ",
                          c == '^' ? "start" : "end", " (the match is always whole)"),
             at);
      }
      ++pos_;
      return nullptr;
    }
    if (QuantifierLength(at) > 0) {
      NothingToRepeat(at);
      return nullptr;
    }
    if (c == '(') return Group(depth);
    if (c == '[') return SetNode(Class());
    if (c == '\\') return SetNode(Escape(/*in_class=*/false).set);
    if (c == '.') {
      ++pos_;
      return SetNode(Negate(Single('\n')));
    }
    return SetNode(Single(Utf8CodePoint()));
  }

  NodePtr Group(int depth) {
    const size_t open = pos_++;
    if (depth + 1 > kMaxDepth) Fail(absl::StrCat("groups nested deeper than ", kMaxDepth), open);
    if (ok() && pos_ < re_.size() && re_[pos_] == '?') GroupKind(open);
    NodePtr inner = ok() ? Alternation(depth + 1) : Epsilon();
    if (ok() && (pos_ >= re_.size() || re_[pos_] != ')')) Fail("an unterminated group '('", open);
    ++pos_;  // )
    return inner;
  }

  // Past the `(?...` of a group that is a plain one, or refused.
  void GroupKind(size_t open) {
    struct Refused {
      absl::string_view prefix;
      absl::string_view what;
    };
    static constexpr Refused kRefused[] = {
        {"(?=", "a lookahead (?="},          {"(?!", "a negative lookahead (?!"},
        {"(?<=", "a lookbehind (?<="},       {"(?<!", "a negative lookbehind (?<!"},
        {"(?P=", "a backreference (?P="},    {"(?#", "a comment group (?#"},
        {"(?P>", "a recursion (?P>"},        {"(?R", "a recursion (?R"},
        {"(?|", "a branch reset group (?|"}, {"(?>", "an atomic group (?>"},
    };
    pos_ = open;
    for (const Refused& r : kRefused) {
      if (At(r.prefix)) return Fail(r.what, open);
    }
    if (At("(?:")) {
      pos_ += 3;
      return;
    }
    if (At("(?P<") || At("(?<")) {  // a named group, matched as a plain one
      pos_ += At("(?P<") ? 4 : 3;
      const size_t name = pos_;
      while (pos_ < re_.size() && (absl::ascii_isalnum(re_[pos_]) || re_[pos_] == '_')) ++pos_;
      if (pos_ == name || pos_ >= re_.size() || re_[pos_] != '>' ||
          absl::ascii_isdigit(re_[name])) {
        return Fail("an invalid group name", open);
      }
      ++pos_;
      return;
    }
    if (pos_ + 2 < re_.size() && (absl::ascii_isalpha(re_[pos_ + 2]) || re_[pos_ + 2] == '-')) {
      return Fail(absl::StrCat("inline flags (?", std::string(1, re_[pos_ + 2])), open);
    }
    Fail("an unknown group (?", open);
  }

  // A class [..] or [^..]: its code points.
  CodeSet Class() {
    const size_t open = pos_;
    ++pos_;  // [
    const bool negate = pos_ < re_.size() && re_[pos_] == '^';
    if (negate) ++pos_;
    // `[]..]` is a class holding `]` in Python and RE2, and the empty class in ECMAScript.
    if (pos_ < re_.size() && re_[pos_] == ']') {
      Fail("a ']' first in a class (escape it as \\])", pos_);
      return {};
    }
    CodeSet set;
    while (ok() && pos_ < re_.size() && re_[pos_] != ']') {
      const ClassItem lo = ClassAtom();
      if (!ok()) break;
      if (pos_ + 1 < re_.size() && re_[pos_] == '-' && re_[pos_ + 1] != ']') {
        const size_t dash = pos_;
        ++pos_;
        const ClassItem hi = ClassAtom();
        if (!ok()) break;
        if (!lo.single || !hi.single || hi.cp < lo.cp) {
          Fail(lo.single && hi.single ? "a class range that runs backwards"
                                      : "a class escape as a range end",
               dash);
          break;
        }
        set.emplace_back(lo.cp, hi.cp);
      } else {
        set.insert(set.end(), lo.set.begin(), lo.set.end());
      }
    }
    if (ok() && pos_ >= re_.size()) Fail("an unterminated class '['", open);
    if (!ok()) return {};
    ++pos_;  // ]
    set = Normalize(std::move(set));
    return negate ? Negate(set) : set;
  }

  // What an escape or a character stands for: one code point (`single`, in `cp`), or a
  // class of them (\d ...).
  struct ClassItem {
    CodeSet set;
    bool single = false;
    uint32_t cp = 0;
  };

  ClassItem ClassAtom() {
    if (re_[pos_] == '\\') return Escape(/*in_class=*/true);
    const uint32_t cp = Utf8CodePoint();
    return {Single(cp), true, cp};
  }

  uint32_t Utf8CodePoint() {
    uint32_t cp = 0;
    const int n = DecodeUtf8(re_, pos_, &cp);
    if (n == 0) {
      Fail("invalid UTF-8", pos_);
      return 0;
    }
    pos_ += n;
    return cp;
  }

  ClassItem Escape(bool in_class) {
    const size_t at = pos_;
    if (pos_ + 1 >= re_.size()) {
      Fail("a '\\' at the end", at);
      return {};
    }
    const char e = re_[pos_ + 1];
    pos_ += 2;
    const auto single = [](uint32_t cp) { return ClassItem{Single(cp), true, cp}; };
    if (absl::string_view("dDwWsS").find(e) != absl::string_view::npos) {
      const char lower = absl::ascii_tolower(e);
      const CodeSet base = lower == 'd' ? Digits() : lower == 'w' ? WordChars() : Spaces();
      return {e == lower ? base : Negate(base)};
    }
    static constexpr std::pair<char, char> kControls[] = {
        {'n', '\n'}, {'t', '\t'}, {'r', '\r'}, {'f', '\f'}, {'v', '\v'}};
    for (const auto& [letter, c] : kControls) {
      if (e == letter) return single(c);
    }
    if (e == 'b' && in_class) return single('\b');  // a backspace inside a class
    if (e == 'x') return single(Hex(2, at, "\\x"));
    if (e == 'u') return single(Utf16Escape(at));
    const bool digit_next = pos_ < re_.size() && absl::ascii_isdigit(re_[pos_]);
    if (e == '0' && !digit_next) return single(0);
    absl::string_view what;
    if (e == '0') {
      what = "an octal escape";
    } else if (e == 'b' || e == 'B') {
      what = "a word boundary";
    } else if (e == 'k' || (e >= '1' && e <= '9')) {
      what = "a backreference";
    } else if (e == 'p' || e == 'P') {
      what = "a Unicode property";
    } else if (absl::ascii_isalpha(e)) {
      what = "an unsupported escape";
    }
    if (!what.empty()) {
      Fail(absl::StrCat(what, " \\", std::string(1, e)), at);
      return {};
    }
    pos_ = at + 1;  // an escaped punctuation mark (or any other character): itself
    return single(Utf8CodePoint());
  }

  // \uHHHH, a surrogate pair \uHHHH\uHHHH as the one code point it encodes.
  uint32_t Utf16Escape(size_t at) {
    const uint32_t u = Hex(4, at, "\\u");
    if (!ok() || !IsSurrogate(u)) return u;
    if (u < 0xDC00 && At("\\u")) {
      const size_t back = pos_;
      pos_ += 2;
      const uint32_t low = Hex(4, back, "\\u");
      if (ok() && low >= 0xDC00 && low <= kSurrogateHi) {
        return 0x10000 + ((u - kSurrogateLo) << 10) + (low - 0xDC00);
      }
    }
    Fail("a lone surrogate \\u", at);
    return 0;
  }

  uint32_t Hex(int digits, size_t at, absl::string_view escape) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= re_.size() || !absl::ascii_isxdigit(re_[pos_])) {
        Fail(absl::StrCat("an escape ", escape, " without ", digits, " hex digits"), at);
        return 0;
      }
      const char h = absl::ascii_tolower(re_[pos_++]);
      v = v * 16 + static_cast<uint32_t>(absl::ascii_isdigit(h) ? h - '0' : h - 'a' + 10);
    }
    return v;
  }

  const absl::string_view re_;
  const RegexOptions& options_;
  size_t pos_ = 0;
  absl::Status error_;
};

// A code point as written inside a GBNF class.
std::string ClassChar(uint32_t cp) {
  const char c = static_cast<char>(cp);
  const auto in = [c](absl::string_view chars) { return chars.find(c) != absl::string_view::npos; };
  const bool as_is = absl::ascii_isalnum(c) || in(" !#$%&'()*+,./:;<=>?@_`{|}~");
  if (cp < 0x80 && as_is) return std::string(1, c);
  if (cp < 0x80 && in("\\][-^\"")) return absl::StrCat("\\", std::string(1, c));
  if (cp < 0x100) return absl::StrFormat("\\x%02X", cp);
  if (cp < 0x10000) return absl::StrFormat("\\u%04X", cp);
  return absl::StrFormat("\\U%08X", cp);
}

// Ranges as GBNF writes them: `s`'s, but joined across the surrogates (which GBNF leaves out
// of every class anyway) and never starting or ending on one (GBNF refuses those).
CodeSet Writable(const CodeSet& s) {
  CodeSet out;
  for (Range r : s) {
    if (IsSurrogate(r.first)) r.first = kSurrogateHi + 1;
    if (IsSurrogate(r.second)) r.second = kSurrogateLo - 1;
    if (r.first > r.second) continue;
    if (!out.empty() && out.back().second == kSurrogateLo - 1 && r.first == kSurrogateHi + 1) {
      out.back().second = r.second;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

// `s` as a GBNF class, [..] or [^..], whichever is shorter.
std::string ClassText(const CodeSet& s) {
  if (s.empty()) return kNothing;
  const CodeSet positive = Writable(s);
  const CodeSet negative = Writable(Negate(s));
  const bool negate = negative.size() < positive.size();
  std::string out = negate ? "[^" : "[";
  for (const Range& r : negate ? negative : positive) {
    out += ClassChar(r.first);
    if (r.second > r.first + 1) out += "-";
    if (r.second > r.first) out += ClassChar(r.second);
  }
  out += "]";
  return out;
}

// The JSON short escapes: the character after the backslash for each code point.
constexpr std::pair<uint32_t, char> kJsonShort[] = {
    {'"', '"'}, {'\\', '\\'}, {'\b', 'b'}, {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'},
};

// How JSON writes `cp` inside a string into *out, when that is one spelling; false for a
// control character whose \u00XX has a hex letter (written in either case).
bool JsonSpelling(uint32_t cp, std::string* out) {
  for (const auto& [c, letter] : kJsonShort) {
    if (c == cp) return (*out = absl::StrCat("\\", std::string(1, letter)), true);
  }
  if (cp < 0x20 && (cp & 0xF) >= 10) return false;
  out->clear();
  if (cp < 0x20) *out = absl::StrFormat("\\u%04x", cp);
  if (cp >= 0x20) AppendUtf8(cp, out);
  return true;
}

bool IsJsonShort(uint32_t cp) {
  return std::any_of(std::begin(kJsonShort), std::end(kJsonShort),
                     [cp](const auto& e) { return e.first == cp; });
}

// `prefix` and then one code point of `s`, as a GBNF sequence.
std::string PrefixedSet(const std::string& prefix, const CodeSet& s) {
  if (s.size() == 1 && s[0].first == s[0].second) {
    std::string bytes = prefix;
    AppendUtf8(s[0].first, &bytes);
    return GbnfLiteral(bytes);
  }
  return prefix.empty() ? ClassText(s) : absl::StrCat(GbnfLiteral(prefix), " ", ClassText(s));
}

// The GBNF alternatives for a code point of `s` as JSON writes it inside a string: as itself,
// or escaped (\" \\ \b \f \n \r \t, and \u00XX for the other controls, hex letters in either
// case).
std::vector<std::string> JsonAlternatives(const CodeSet& s) {
  std::vector<std::string> alts;
  const CodeSet plain = Intersect(s, Negate({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
  if (!plain.empty()) alts.push_back(PrefixedSet("", plain));
  std::vector<std::pair<std::string, CodeSet>> escapes;  // after the backslash
  CodeSet letters;
  for (const auto& [c, letter] : kJsonShort) {
    if (Contains(s, c)) letters.emplace_back(letter, letter);
  }
  if (!letters.empty()) escapes.emplace_back("", Normalize(letters));
  for (uint32_t high = 0; high < 2; ++high) {
    CodeSet lows;  // the last hex digit
    for (uint32_t low = 0; low < 16; ++low) {
      const uint32_t cp = high * 16 + low;
      if (!Contains(s, cp) || IsJsonShort(cp)) continue;
      const char digit = "0123456789abcdef"[low];
      lows.emplace_back(digit, digit);
      lows.emplace_back(absl::ascii_toupper(digit), absl::ascii_toupper(digit));
    }
    if (!lows.empty()) escapes.emplace_back(absl::StrCat("u00", high), Normalize(lows));
  }
  if (escapes.size() == 1) alts.push_back(PrefixedSet("\\" + escapes[0].first, escapes[0].second));
  if (escapes.size() > 1) {
    std::vector<std::string> tails;
    tails.reserve(escapes.size());
    for (const auto& [prefix, set] : escapes) tails.push_back(PrefixedSet(prefix, set));
    alts.push_back(absl::StrCat(GbnfLiteral("\\"), " (", absl::StrJoin(tails, " | "), ")"));
  }
  return alts;
}

// Writes the regex graph as GBNF expressions. Helper rules, named rule + "-" + N, are written
// once each: a JSON-escaped class, and a node used in more than one place whose text is long
// (so the text grows with the graph, not with the paths through it).
class Emitter {
 public:
  Emitter(absl::string_view rule, bool json_string) : rule_(rule), json_string_(json_string) {}

  std::string Rules(const NodePtr& root) {
    CountUses(root.get());
    std::string out = absl::StrCat(rule_, " ::= ", Expr(*root, Context::kTop), "\n");
    for (const auto& [name, body] : helpers_) absl::StrAppend(&out, name, " ::= ", body, "\n");
    return out;
  }

 private:
  // Where an expression goes: the whole rule (alternatives need no parentheses), a part of a
  // sequence, or the operand of a repetition (one GBNF item).
  enum class Context { kTop, kSequence, kAtom };

  // A set as GBNF: `literal` bytes (to join with neighbouring literals), or an item.
  struct SetText {
    bool literal = false;
    std::string text;
  };

  SetText Set(const CodeSet& s) {
    std::string bytes;
    if (s.size() == 1 && s[0].first == s[0].second) {
      if (!json_string_) AppendUtf8(s[0].first, &bytes);
      if (!json_string_ || JsonSpelling(s[0].first, &bytes)) return {true, bytes};
    }
    if (!json_string_) return {false, ClassText(s)};
    const std::vector<std::string> alts = JsonAlternatives(s);
    if (alts.empty()) return {false, kNothing};
    if (alts.size() == 1 && alts[0][0] == '[') return {false, alts[0]};
    return {false, Helper(absl::StrJoin(alts, " | "))};
  }

  // The name of a helper rule with `body`, added if new.
  std::string Helper(const std::string& body) {
    auto [it, added] = helper_names_.try_emplace(body, "");
    if (added) {
      it->second = absl::StrCat(rule_, "-", helper_names_.size());
      helpers_.emplace_back(it->second, body);
    }
    return it->second;
  }

  void CountUses(const Node* n) {
    if (++uses_[n] > 1) return;
    for (const NodePtr& k : n->kids) CountUses(k.get());
  }

  // A shared node's text once, as a helper rule, unless it is short.
  std::string Expr(const Node& n, Context context) {
    if (n.kind == Node::Kind::kSet || uses_[&n] < 2) return Text(n, context);
    auto it = shared_.find(&n);
    if (it == shared_.end()) {  // not try_emplace: Text adds entries of its own
      const std::string body = Text(n, Context::kTop);
      it = shared_.emplace(&n, body.size() <= kInlineBytes ? "" : Helper(body)).first;
    }
    return it->second.empty() ? Text(n, context) : it->second;
  }

  std::string Text(const Node& n, Context context) {
    switch (n.kind) {
      case Node::Kind::kSet: {
        SetText t = Set(n.set);
        return t.literal ? GbnfLiteral(t.text) : t.text;
      }
      case Node::Kind::kConcat:
        return Concat(n, context);
      case Node::Kind::kAlt: {
        if (n.kids.empty()) return kNothing;
        std::vector<std::string> alts;
        alts.reserve(n.kids.size());
        for (const NodePtr& k : n.kids) alts.push_back(Expr(*k, Context::kSequence));
        std::string text = absl::StrJoin(alts, " | ");
        return context == Context::kTop ? text : absl::StrCat("(", text, ")");
      }
      case Node::Kind::kRepeat: {  // its body is not nullable (RepeatOf)
        const int64_t min = n.min;
        const int64_t max = n.max;
        std::string suffix =
            absl::StrCat("{", min, ",", max == kUnbounded ? "" : absl::StrCat(max), "}");
        if (min == max) suffix = absl::StrCat("{", min, "}");
        if (max == kUnbounded && min <= 1) suffix = min == 0 ? "*" : "+";
        if (min == 0 && max == 1) suffix = "?";
        std::string text = Expr(*n.kids[0], Context::kAtom) + suffix;
        return context == Context::kAtom ? absl::StrCat("(", text, ")") : text;
      }
    }
    return "";
  }

  std::string Concat(const Node& n, Context context) {
    std::vector<std::string> parts;
    std::string run;  // literal bytes not yet written
    bool only_literal = true;
    for (const NodePtr& k : n.kids) {
      std::string text;
      if (k->kind == Node::Kind::kSet) {
        SetText t = Set(k->set);
        if (t.literal) {
          run += t.text;
          continue;
        }
        text = std::move(t.text);
      } else {
        text = Expr(*k, Context::kSequence);
        if (text == "\"\"") continue;  // the empty string: nothing to write
      }
      if (!run.empty()) parts.push_back(GbnfLiteral(run));
      run.clear();
      parts.push_back(std::move(text));
      only_literal = false;
    }
    if (!run.empty()) parts.push_back(GbnfLiteral(run));
    if (parts.empty()) return "\"\"";
    std::string text = absl::StrJoin(parts, " ");
    // One literal is one GBNF item ("ab"* repeats ab).
    if (context != Context::kAtom || only_literal) return text;
    return absl::StrCat("(", text, ")");
  }

  const std::string rule_;
  const bool json_string_;
  absl::flat_hash_map<const Node*, int> uses_;                // references to each node
  absl::flat_hash_map<const Node*, std::string> shared_;      // its helper, "" if inlined
  std::map<std::string, std::string> helper_names_;           // body -> name
  std::vector<std::pair<std::string, std::string>> helpers_;  // (name, body) in order
};

}  // namespace

absl::StatusOr<std::string> RegexToGbnf(absl::string_view regex, absl::string_view rule,
                                        const RegexOptions& options) {
  if (rule.empty() || !std::all_of(rule.begin(), rule.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '_' || c == '-';
      })) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex: rule name '", rule, "' is not [a-zA-Z0-9_-]+"));
  }
  absl::StatusOr<NodePtr> root = Parser(regex, options).Parse();
  if (!root.ok()) return root.status();
  return Emitter(rule, options.json_string).Rules(*root);
}

}  // namespace tpserve::grammar
