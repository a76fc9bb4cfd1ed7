#include "server/grammar/gbnf.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::grammar {
namespace {

using ::tpserve::model::AppendUtf8;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxNesting = 200;

// A code-point range, inclusive.
using Range = std::pair<uint32_t, uint32_t>;

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_' || c == '-'; }

// The byte-range sequences whose strings are exactly the UTF-8 encodings of lo..hi (which
// holds no surrogate), appended to `out`: split by encoded length, then until each piece is a
// product of byte ranges (the construction RE2 and Go's regexp use).
void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<std::vector<Range>>* out) {
  for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= bound && bound < hi) {
      SplitUtf8(lo, bound, out);
      SplitUtf8(bound + 1, hi, out);
      return;
    }
  }
  const int n = hi < 0x80 ? 1 : hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the bits of the last i bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  AppendUtf8(lo, &a);
  AppendUtf8(hi, &b);
  std::vector<Range> seq;
  seq.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out->push_back(std::move(seq));
}

// Sorted, merged, without surrogates; complemented when `negate`.
std::vector<Range> Normalize(std::vector<Range> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<Range> merged;
  for (const Range& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  if (negate) {
    std::vector<Range> complement;
    uint32_t next = 0;
    for (const Range& r : merged) {
      if (r.first > next) complement.emplace_back(next, r.first - 1);
      next = r.second + 1;
    }
    if (next <= kMaxCodePoint) complement.emplace_back(next, kMaxCodePoint);
    merged = std::move(complement);
  }
  std::vector<Range> out;
  for (const Range& r : merged) {  // less the surrogates D800..DFFF
    if (r.second < 0xD800 || r.first > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.first < 0xD800) out.emplace_back(r.first, 0xD7FF);
    if (r.second > 0xDFFF) out.emplace_back(0xE000, r.second);
  }
  return out;
}

// One item of a sequence before compilation: bytes or a rule, in order.
using Sequence = std::vector<Element>;

class Compiler {
 public:
  Compiler(absl::string_view text, const GrammarLimits& limits) : text_(text), limits_(limits) {}

  absl::StatusOr<std::shared_ptr<const Grammar>> Compile(absl::string_view root_rule) {
    if (text_.size() > static_cast<size_t>(limits_.max_text_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grammar: ", text_.size(), " bytes exceeds the limit of ", limits_.max_text_bytes));
    }
    SkipSpace(true);
    while (ok() && pos_ < text_.size()) {
      const std::string name = Name();
      if (!ok()) break;
      SkipSpace(false);
      if (text_.substr(pos_, 3) != "::=") {
        Fail(absl::StrCat("expected '::=' after rule name '", name, "'"));
        break;
      }
      pos_ += 3;
      const int32_t id = RuleId(name);
      if (defined_[id]) {
        Fail(absl::StrCat("rule '", name, "' is defined twice"));
        break;
      }
      defined_[id] = true;
      rules_[id] = Alternatives(0);
      SkipSpace(true);
    }
    if (!ok()) return error_;
    for (size_t id = 0; id < rules_.size(); ++id) {
      if (!defined_[id]) {
        return absl::InvalidArgumentError(
            absl::StrCat("grammar: rule '", names_[id], "' is used but not defined"));
      }
    }
    auto root = ids_.find(absl::StrCat(root_rule));
    if (root == ids_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: no rule '", root_rule, "' to start from"));
    }
    if (absl::Status s = CheckLeftRecursion(); !s.ok()) return s;
    return Build(root->second);
  }

 private:
  bool ok() const { return error_.ok(); }

  void Fail(absl::string_view what) {
    if (!ok()) return;
    error_ = absl::InvalidArgumentError(absl::StrCat("grammar: ", what, " at offset ", pos_));
  }

  // Skips spaces and comments; newlines too when `newlines`, or when the next line goes on
  // with the same rule (it does not start with `name ::=`).
  void SkipSpace(bool newlines) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      const bool space = c == ' ' || c == '\t' || c == '\r' ||
                         (c == '\n' && (newlines || !NextLineStartsARule(pos_ + 1)));
      if (space) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  bool NextLineStartsARule(size_t at) const {
    while (at < text_.size() &&
           (text_[at] == ' ' || text_[at] == '\t' || text_[at] == '\r' || text_[at] == '\n')) {
      ++at;
    }
    if (at >= text_.size()) return true;  // the text ends: so does the rule
    size_t end = at;
    while (end < text_.size() && IsNameChar(text_[end])) ++end;
    if (end == at) return false;
    while (end < text_.size() && (text_[end] == ' ' || text_[end] == '\t')) ++end;
    return text_.substr(end, 3) == "::=";
  }

  std::string Name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && IsNameChar(text_[pos_])) ++pos_;
    if (pos_ == start) Fail("expected a rule name");
    return absl::StrCat(text_.substr(start, pos_ - start));
  }

  int32_t RuleId(const std::string& name) {
    auto [it, added] = ids_.try_emplace(name, static_cast<int32_t>(rules_.size()));
    if (added) {
      rules_.emplace_back();
      names_.push_back(name);
      defined_.push_back(false);
    }
    return it->second;
  }

  int32_t NewRule(absl::string_view hint, std::vector<Sequence> alternatives) {
    const int32_t id = static_cast<int32_t>(rules_.size());
    rules_.push_back(std::move(alternatives));
    names_.push_back(absl::StrCat(hint, "#", id));
    defined_.push_back(true);
    if (static_cast<int32_t>(rules_.size()) > limits_.max_rules) {
      Fail(absl::StrCat("more than ", limits_.max_rules, " rules"));
    }
    return id;
  }

  static Element RuleRef(int32_t rule) {
    Element e;
    e.kind = Element::Kind::kRule;
    e.rule = rule;
    return e;
  }

  void CountElements(size_t n) {
    elements_ += n;
    if (elements_ > static_cast<size_t>(limits_.max_elements)) {
      Fail(absl::StrCat("more than ", limits_.max_elements, " elements"));
    }
  }

  std::vector<Sequence> Alternatives(int depth) {
    std::vector<Sequence> alts;
    if (depth > kMaxNesting) {
      Fail(absl::StrCat("groups nested deeper than ", kMaxNesting));
      return alts;
    }
    alts.push_back(SequenceOf(depth));
    while (ok() && pos_ < text_.size() && text_[pos_] == '|') {
      ++pos_;
      alts.push_back(SequenceOf(depth));
    }
    return alts;
  }

  Sequence SequenceOf(int depth) {
    Sequence seq;
    while (ok()) {
      SkipSpace(false);
      if (pos_ >= text_.size()) break;
      const char c = text_[pos_];
      if (c == '|' || c == ')' || c == '\n') break;
      Sequence item = Item(depth);
      if (!ok()) break;
      item = Repeat(std::move(item));
      CountElements(item.size());
      seq.insert(seq.end(), item.begin(), item.end());
    }
    return seq;
  }

  Sequence Item(int depth) {
    const char c = text_[pos_];
    if (c == '"') return Literal();
    if (c == '[') return {RuleRef(Class())};
    if (c == '.') {
      ++pos_;
      return {RuleRef(ClassRule({{0, kMaxCodePoint}}, false))};
    }
    if (c == '(') {
      ++pos_;
      std::vector<Sequence> alts = Alternatives(depth + 1);
      SkipSpace(true);
      if (pos_ >= text_.size() || text_[pos_] != ')') {
        Fail("expected ')'");
        return {};
      }
      ++pos_;
      return {RuleRef(NewRule("group", std::move(alts)))};
    }
    if (IsNameChar(c)) {
      const std::string name = Name();
      return {RuleRef(RuleId(name))};
    }
    Fail(absl::StrCat("unexpected '", absl::CHexEscape(std::string(1, c)), "'"));
    return {};
  }

  // One code point of a literal or class, escapes decoded.
  uint32_t CodePoint() {
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\\') {
      if (pos_ + 1 >= text_.size()) {
        Fail("a '\\' at the end");
        return 0;
      }
      const char e = text_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case 'x':
          return Hex(2);
        case 'u':
          return Hex(4);
        case 'U':
          return Hex(8);
        default:
          return static_cast<unsigned char>(e);  // \\ \" \] \[ \- \^ and the like
      }
    }
    // UTF-8 as is.
    const int n = c < 0x80           ? 1
                  : (c >> 5) == 0x6  ? 2
                  : (c >> 4) == 0xE  ? 3
                  : (c >> 3) == 0x1E ? 4
                                     : 0;
    if (n == 0 || pos_ + n > text_.size()) {
      Fail("invalid UTF-8");
      return 0;
    }
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const unsigned char b = static_cast<unsigned char>(text_[pos_ + i]);
      if ((b & 0xC0) != 0x80) {
        Fail("invalid UTF-8");
        return 0;
      }
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += n;
    return cp;
  }

  uint32_t Hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = pos_ < text_.size() ? text_[pos_] : '\0';
      if (!absl::ascii_isxdigit(h)) {
        Fail("expected a hex digit");
        return 0;
      }
      v = v * 16 + static_cast<uint32_t>(
                       absl::ascii_isdigit(h) ? h - '0' : absl::ascii_tolower(h) - 'a' + 10);
      ++pos_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) Fail("not a Unicode scalar value");
    return v;
  }

  Sequence Literal() {
    ++pos_;  // the opening quote
    std::string bytes;
    while (ok() && pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\n') {
        Fail("a newline inside a literal");
        break;
      }
      AppendUtf8(CodePoint(), &bytes);
    }
    if (ok() && pos_ >= text_.size()) Fail("an unterminated literal");
    ++pos_;
    Sequence seq;
    for (char b : bytes) {
      Element e;
      e.kind = Element::Kind::kBytes;
      e.lo = e.hi = static_cast<uint8_t>(b);
      seq.push_back(e);
    }
    return seq;
  }

  int32_t Class() {
    ++pos_;  // [
    bool negate = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<Range> ranges;
    while (ok() && pos_ < text_.size() && text_[pos_] != ']') {
      const uint32_t lo = CodePoint();
      uint32_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = CodePoint();
        if (hi < lo) Fail("a class range that runs backwards");
      }
      ranges.emplace_back(lo, hi);
    }
    if (ok() && pos_ >= text_.size()) Fail("an unterminated class");
    ++pos_;
    return ClassRule(std::move(ranges), negate);
  }

  int32_t ClassRule(std::vector<Range> ranges, bool negate) {
    const std::vector<Range> cps = Normalize(std::move(ranges), negate);
    auto [it, added] = classes_.try_emplace(cps, -1);
    if (!added) return it->second;
    std::vector<std::vector<Range>> byte_seqs;
    for (const Range& r : cps) SplitUtf8(r.first, r.second, &byte_seqs);
    std::vector<Sequence> alts;
    for (const std::vector<Range>& bs : byte_seqs) {
      Sequence seq;
      for (const Range& b : bs) {
        Element e;
        e.kind = Element::Kind::kBytes;
        e.lo = static_cast<uint8_t>(b.first);
        e.hi = static_cast<uint8_t>(b.second);
        seq.push_back(e);
      }
      CountElements(seq.size());
      alts.push_back(std::move(seq));
    }
    // An empty class ([^\x00-\U0010FFFF]) has no alternative: nothing matches it.
    it->second = NewRule("class", std::move(alts));
    return it->second;
  }

  // The item's postfix repetition, if any.
  Sequence Repeat(Sequence item) {
    if (pos_ >= text_.size()) return item;
    const char c = text_[pos_];
    if (c != '*' && c != '+' && c != '?' && c != '{') return item;
    ++pos_;
    int64_t min = 0, max = -1;  // -1: unbounded
    if (c == '+') min = 1;
    if (c == '?') max = 1;
    if (c == '{') {
      min = Number();
      max = min;
      if (ok() && pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        max = pos_ < text_.size() && text_[pos_] == '}' ? -1 : Number();
      }
      if (ok() && (pos_ >= text_.size() || text_[pos_] != '}')) Fail("expected '}'");
      ++pos_;
      if (ok() && max >= 0 && max < min) Fail("a repetition {m,n} with n < m");
    }
    if (!ok()) return {};
    const int64_t bound = max >= 0 ? max : min;
    if (bound * static_cast<int64_t>(item.size()) > limits_.max_elements) {
      Fail(absl::StrCat("a repetition past ", limits_.max_elements, " elements"));
      return {};
    }
    // One element to repeat: the item itself, or a rule holding it.
    const Element unit = item.size() == 1 ? item[0] : RuleRef(NewRule("item", {item}));
    Sequence out(static_cast<size_t>(min), unit);
    if (max < 0) {  // star ::= unit star | ""
      const int32_t star = NewRule("star", {});
      rules_[star] = {{unit, RuleRef(star)}, {}};
      out.push_back(RuleRef(star));
    } else if (max > min) {  // opt_k ::= unit opt_{k-1} | "", nested max - min deep
      int32_t inner = NewRule("opt", {{unit}, {}});
      for (int64_t k = 1; k < max - min && ok(); ++k) {
        inner = NewRule("opt", {{unit, RuleRef(inner)}, {}});
      }
      out.push_back(RuleRef(inner));
    }
    return out;
  }

  int64_t Number() {
    int64_t v = 0;
    const size_t start = pos_;
    while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_]) && v <= limits_.max_elements) {
      v = v * 10 + (text_[pos_++] - '0');
    }
    if (pos_ == start) Fail("expected a number");
    if (v > limits_.max_elements) Fail("a repetition count past the limit");
    return v;
  }

  // Refuses a rule that can reach itself without consuming a byte: matching would never end.
  absl::Status CheckLeftRecursion() {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Sequence& seq : rules_[r]) {
          bool all = true;
          for (const Element& e : seq) {
            all = all && e.kind == Element::Kind::kRule && nullable[e.rule];
          }
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    // left[r]: the rules r may start with.
    std::vector<std::vector<int32_t>> left(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Sequence& seq : rules_[r]) {
        for (const Element& e : seq) {
          if (e.kind != Element::Kind::kRule) break;
          left[r].push_back(e.rule);
          if (!nullable[e.rule]) break;
        }
      }
    }
    std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
    for (size_t start = 0; start < n; ++start) {
      if (color[start] != 0) continue;
      std::vector<std::pair<int32_t, size_t>> path = {{static_cast<int32_t>(start), 0}};
      color[start] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == left[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const int32_t s = left[r][next++];
        if (color[s] == 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "grammar: rule '", names_[s],
              "' is left-recursive (it can reach itself before any byte, e.g. a repetition of "
              "what may be empty)"));
        }
        if (color[s] == 0) {
          color[s] = 1;
          path.emplace_back(s, 0);
        }
      }
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const Grammar> Build(int32_t root) {
    auto g = std::make_shared<Grammar>();
    g->root = root;
    g->rule_names = names_;
    g->alternatives.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Sequence& seq : rules_[r]) {
        g->alternatives[r].push_back(static_cast<int32_t>(g->elements.size()));
        g->elements.insert(g->elements.end(), seq.begin(), seq.end());
        g->elements.push_back(Element{});  // kEnd
      }
    }
    return g;
  }

  const absl::string_view text_;
  const GrammarLimits limits_;
  size_t pos_ = 0;
  absl::Status error_;
  size_t elements_ = 0;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  std::map<std::vector<Range>, int32_t> classes_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(absl::string_view text,
                                                           const GrammarLimits& limits,
                                                           absl::string_view root_rule) {
  return Compiler(text, limits).Compile(root_rule);
}

std::string PrefixRuleNames(absl::string_view text, absl::string_view prefix) {
  std::string out;
  size_t i = 0;
  // Copies text[i] up to and including the `close` that ends a quoted or bracketed part.
  const auto copy_through = [&](char close) {
    out.push_back(text[i++]);
    while (i < text.size() && text[i] != close) {
      if (text[i] == '\\' && i + 1 < text.size()) out.push_back(text[i++]);
      out.push_back(text[i++]);
    }
    if (i < text.size()) out.push_back(text[i++]);
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"') {
      copy_through('"');
    } else if (c == '[') {
      copy_through(']');
    } else if (c == '{') {
      copy_through('}');  // a repetition count
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') out.push_back(text[i++]);
    } else if (IsNameChar(c)) {
      out.append(prefix.data(), prefix.size());
      while (i < text.size() && IsNameChar(text[i])) out.push_back(text[i++]);
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

std::string GbnfLiteral(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += absl::StrFormat("\\x%02X", c);
    } else {
      out.push_back(static_cast<char>(c));  // UTF-8 passes as is
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace tpserve::grammar
