#include "server/grammar/regex_to_gbnf.h"

#include <algorithm>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/grammar/gbnf.h"
#include "server/grammar/matcher.h"

namespace tpserve::grammar {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The regex's grammar, compiled with `rule` as its start; nullptr (and a failure) if either
// step fails.
std::shared_ptr<const Grammar> Compile(const std::string& regex, const RegexOptions& options = {},
                                       const std::string& rule = "re") {
  absl::StatusOr<std::string> text = RegexToGbnf(regex, rule, options);
  EXPECT_TRUE(text.ok()) << text.status() << " for " << regex;
  if (!text.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileGbnf(*text, {}, rule);
  EXPECT_TRUE(g.ok()) << g.status() << " for " << regex << "\n" << *text;
  return g.ok() ? *g : nullptr;
}

// How JSON writes `s` inside a string (the reference for json_string mode): \" \\ the short
// escapes, other controls as \u00xx (`upper`: \u00XX), all else as is.
std::string JsonContents(const std::string& s, bool upper = false) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += upper ? absl::StrFormat("\\u%04X", c) : absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(c);
        }
    }
  }
  return out;
}

// Random strings of length 0..8 over `alphabet`, the same ones for each run.
std::vector<std::string> RandomStrings(const std::string& alphabet, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    std::string s(rng() % 9, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    out.push_back(s);
  }
  return out;
}

// Every string one edit (a deletion, an insertion or a replacement from `alphabet`) away from
// `s`: the near misses of a sentence.
std::vector<std::string> Neighbours(const std::string& s, const std::string& alphabet) {
  std::vector<std::string> out;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size()) out.push_back(s.substr(0, i) + s.substr(i + 1));
    for (char c : alphabet) {
      out.push_back(s.substr(0, i) + c + s.substr(i));
      if (i < s.size()) out.push_back(s.substr(0, i) + c + s.substr(i + 1));
    }
  }
  return out;
}

struct Case {
  std::string regex;
  std::string reference;  // for std::regex where it lacks a construct ("" for `regex`)
  std::vector<std::string> yes;
  std::vector<std::string> no;
};

// Every construct, checked against std::regex (ECMAScript) full matches.
const std::vector<Case>& Cases() {
  static const auto* cases = new std::vector<Case>{
      {"", "", {""}, {"a"}},
      {"abc", "", {"abc"}, {"ab", "abcc"}},
      {"a|b|c", "", {"a", "c"}, {"ab", ""}},
      {"ab|cd|", "", {"", "ab", "cd"}, {"a", "abcd"}},
      {"(|a)b", "", {"b", "ab"}, {"a"}},
      {"a*", "", {"", "aaaa"}, {"b"}},
      {"a+b+", "", {"ab", "aabbb"}, {"a", "b", "ba"}},
      {"ab?c", "", {"ac", "abc"}, {"abbc"}},
      {"a{3}", "", {"aaa"}, {"aa", "aaaa"}},
      {"a{2,}", "", {"aa", "aaaaaaa"}, {"a"}},
      {"a{1,3}b{0,2}", "", {"a", "aaabb"}, {"aaaa", "b", "abbb"}},
      {"(ab){2}", "", {"abab"}, {"ab", "aabb"}},
      {"(a|bc){1,3}", "", {"a", "bca", "abcbc"}, {"", "b", "aaaa"}},
      {"[abc]+", "", {"cab"}, {"", "abd"}},
      {"[a-c]*x", "", {"x", "abcx"}, {"dx", "a"}},
      {"[^ab]", "", {"c", " "}, {"a", "b", "cc"}},
      {"[^a-c]{2}", "", {"dd", "x-"}, {"ad", "d"}},
      {"[-a]+[a-]", "", {"--", "a-a"}, {"-"}},
      {"[a\\-z]+", "", {"a-z", "-"}, {"b"}},
      {"\\d+", "", {"0", "1234567"}, {"", "a1"}},
      {"\\w+", "", {"a_Z9"}, {"a-b", " "}},
      {"\\s*x", "", {"x", " \t\nx"}, {"y"}},
      {"\\D\\W\\S", "", {"a a", "a-b"}, {"1-b", "aab", "a b "}},
      {"[\\d\\s]+", "", {"1 2", "\t"}, {"a"}},
      {"[^\\w]", "", {"-", " "}, {"a", "_"}},
      {"[\\w.-]+@[\\w-]+", "", {"a.b-c@d-e"}, {"a@", "@b", "a@b.c"}},
      {".", "", {"a", " ", "\t"}, {"\n", "", "ab"}},
      {".*a", "", {"a", "xya"}, {"", "a\na\nb"}},
      {"a.c", "", {"abc", "a.c"}, {"a\nc", "ac"}},
      {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/\\-",
       "",
       {".*+?()[]{}|^$\\/-"},
       {".*+?()[]{}|^$\\/"}},
      {"\\x41\\u0042[\\x61-\\x63]", "", {"ABa", "ABc"}, {"AB", "ABd"}},
      {"\\t\\n\\r\\f\\v", "", {"\t\n\r\f\v"}, {"tnrfv"}},
      {"(?:ab)+", "", {"ab", "abab"}, {"", "aba"}},
      {"(?P<x>a|b)c", "(a|b)c", {"ac", "bc"}, {"c", "abc"}},
      {"(?<x>a)+b", "(a)+b", {"ab", "aaab"}, {"b"}},
      {"a*?b+?c??d{1,2}?", "", {"bd", "aabbcdd"}, {"ad", "bddd"}},
      {"^ab$", "", {"ab"}, {"", "abab"}},
      {"^a|b$", "", {"a", "b"}, {"ab"}},
      {"(a?)*", "", {"", "aaa"}, {"b"}},
      {"(a*)*b", "", {"b", "aab"}, {"ba"}},
      {"(a|)+c", "", {"c", "aac"}, {"ca"}},
      {"(a*b*)*", "", {"", "abba", "bbb"}, {"c"}},
      {"(a?){2,3}", "", {"", "a", "aaa"}, {"aaaa"}},
      {"(a?b?)+c", "", {"c", "abbac"}, {"cc"}},
      {"(a?(b?c)?)+d", "", {"d", "abcd", "cacd"}, {"bd", "dd"}},
      {"(a?(b?c?)?d?){2,3}", "", {"", "abcd", "dcb"}, {"dcba", "aaaa"}},
      {"()*a(()|b)", "", {"a", "ab"}, {"b"}},
      {"((a|b)c)*d", "", {"d", "acbcd"}, {"abd", "acb"}},
      {"x{0}y", "", {"y"}, {"xy"}},
      {"[.][*+?]\\?", "", {".*?", ".+?"}, {"a*?", ".*"}},
      {"a{0,1}b{1}", "", {"b", "ab"}, {"aab"}},
      {"(a|ab)(c|bcd)", "", {"ac", "abcd", "abc"}, {"abd"}},
      {"[a-cx-z]+0", "", {"ax0", "zzz0"}, {"d0", "a"}},
      {"\\d{2,4}-\\d{2}", "", {"12-34", "1234-56"}, {"1-23", "12345-67"}},
      {"(a+|b)*c", "", {"c", "aabac"}, {"ca"}},
      {"[\\]\\[]+", "", {"[]"}, {"a"}},
      {"[^\\n]+", "", {"ab "}, {"a\nb"}},
      {".{2,3}", "", {"ab", "abc"}, {"a", "abcd", "a\n"}},
      {"(((a)))|((b)c)", "", {"a", "bc"}, {"b", "ac"}},
  };
  return *cases;
}

// The characters to build random strings from: the regex's own, and a few others.
std::string Alphabet(const std::string& regex, bool with_controls) {
  std::set<char> chars(regex.begin(), regex.end());
  for (char c : std::string("ab0_ -.\n")) chars.insert(c);
  if (with_controls) {
    for (char c : std::string("\"\\\t\b\f\x01\x1a")) chars.insert(c);
  }
  return std::string(chars.begin(), chars.end());
}

TEST(RegexToGbnfTest, AgreesWithStdRegex) {
  int checked = 0;
  int positives = 0;
  uint32_t seed = 1;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.regex);
    const auto g = Compile(c.regex);
    ASSERT_NE(g, nullptr);
    const std::regex reference(c.reference.empty() ? c.regex : c.reference);
    for (const std::string& s : c.yes) {
      EXPECT_TRUE(std::regex_match(s, reference)) << "case is wrong: " << s;
      EXPECT_TRUE(MatchesWhole(g, s)) << s;
    }
    for (const std::string& s : c.no) {
      EXPECT_FALSE(std::regex_match(s, reference)) << "case is wrong: " << s;
      EXPECT_FALSE(MatchesWhole(g, s)) << s;
    }
    const std::string alphabet = Alphabet(c.regex, false);
    std::vector<std::string> strings = RandomStrings(alphabet, 300, seed++);
    for (const std::string& yes : c.yes) {
      for (std::string& s : Neighbours(yes, alphabet)) strings.push_back(std::move(s));
    }
    for (const std::string& s : strings) {
      const bool expected = std::regex_match(s, reference);
      ASSERT_EQ(MatchesWhole(g, s), expected) << "'" << s << "'";
      ++checked;
      positives += expected;
    }
  }
  // Enough of both to mean something.
  EXPECT_GT(checked, 300 * static_cast<int>(Cases().size()));
  EXPECT_GT(positives, checked / 20);
}

TEST(RegexToGbnfTest, JsonStringModeAgreesWithStdRegexOnEscapedContents) {
  // std::regex sees the raw contents; the grammar sees them as JSON writes them.
  const std::vector<std::string> regexes = {
      ".",
      ".*",
      "[^a]*",
      "\\W+",
      "\\S*",
      "\\s+",
      "a\"b",
      "\\D{2}",
      "[\"\\\\]+",
      "[\\x00-\\x1f]+",
      "[^\\x00-\\x1f]*",
      "[^\\t]{1,3}",
      "(a|\\\\|\")*",
      "\\x01\\x1a",
      "[\\b]",
  };
  uint32_t seed = 100;
  for (const std::string& regex : regexes) {
    SCOPED_TRACE(regex);
    RegexOptions options;
    options.json_string = true;
    const auto g = Compile(regex, options);
    ASSERT_NE(g, nullptr);
    const std::regex reference(regex);
    for (const std::string& s : RandomStrings(Alphabet(regex, true), 300, seed++)) {
      const bool expected = std::regex_match(s, reference);
      ASSERT_EQ(MatchesWhole(g, JsonContents(s)), expected) << "'" << JsonContents(s) << "'";
      ASSERT_EQ(MatchesWhole(g, JsonContents(s, /*upper=*/true)), expected);
    }
  }
}

TEST(RegexToGbnfTest, JsonStringModeWritesWhatJsonEscapes) {
  RegexOptions json;
  json.json_string = true;
  const auto quote = Compile("a\"b", json);
  EXPECT_TRUE(MatchesWhole(quote, "a\\\"b"));
  EXPECT_FALSE(MatchesWhole(quote, "a\"b"));

  const auto dot = Compile(".", json);
  for (const char* yes : {"\\\\", "\\\"", "a", "\\t", "\\u0001", "\\u001f", "\\u001F", "\xC3\xA9",
                          "\xF0\x9F\x98\x80"}) {
    EXPECT_TRUE(MatchesWhole(dot, yes)) << yes;
  }
  // A lone quote or backslash, a raw control, `.`'s newline, spellings JSON does not use.
  for (const char* no :
       {"\"", "\\", "\t", "\x01", "\\n", "\n", "\\u000a", "\\u0041", "\\/", "\\u0009", "\\x"}) {
    EXPECT_FALSE(MatchesWhole(dot, no)) << no;
  }

  const auto newline = Compile("\\n", json);
  EXPECT_TRUE(MatchesWhole(newline, "\\n"));
  EXPECT_FALSE(MatchesWhole(newline, "\n"));

  const auto not_a = Compile("[^a]", json);
  for (const char* yes : {"b", "\\\"", "\\\\", "\\n", "\\b", "\\u0000", "\xE2\x98\x83"}) {
    EXPECT_TRUE(MatchesWhole(not_a, yes)) << yes;
  }
  for (const char* no : {"a", "\"", "\\", "\n", "\\a"}) {
    EXPECT_FALSE(MatchesWhole(not_a, no)) << no;
  }
  // Outside json_string mode the same regexes take the raw characters.
  EXPECT_TRUE(MatchesWhole(Compile("a\"b"), "a\"b"));
  EXPECT_TRUE(MatchesWhole(Compile("."), "\""));
  EXPECT_FALSE(MatchesWhole(Compile("."), "\\\\"));
}

TEST(RegexToGbnfTest, CodePointsAreUtf8) {
  EXPECT_TRUE(MatchesWhole(Compile("é+"), "ééé"));
  EXPECT_FALSE(MatchesWhole(Compile("é+"), "\xC3"));
  const auto greek = Compile("[α-ω]+");
  EXPECT_TRUE(MatchesWhole(greek, "αβω"));
  EXPECT_FALSE(MatchesWhole(greek, "a"));
  EXPECT_FALSE(MatchesWhole(greek, "\xCE"));
  const auto dot = Compile(".{2}");
  EXPECT_TRUE(MatchesWhole(dot, "☃😀"));
  EXPECT_FALSE(MatchesWhole(dot, "☃"));
  EXPECT_TRUE(MatchesWhole(Compile("\\u00e9\\u00E9"), "éé"));
  EXPECT_TRUE(MatchesWhole(Compile("\\uD83D\\uDE00"), "😀"));  // a UTF-16 surrogate pair
  EXPECT_TRUE(MatchesWhole(Compile("[^a]"), "😀"));
  EXPECT_TRUE(MatchesWhole(Compile("[\\u0000-\\uFFFF]"), "\xEF\xBF\xBF"));
  EXPECT_TRUE(MatchesWhole(Compile("[^\\u0000-\\uD7FF]"), "\xEE\x80\x80"));  // U+E000
  EXPECT_FALSE(MatchesWhole(Compile("[\\s\\S]"), ""));
  EXPECT_TRUE(MatchesWhole(Compile("[\\s\\S]"), "\n"));
  EXPECT_FALSE(MatchesWhole(Compile("[^\\s\\S]"), "a"));  // the empty class
  EXPECT_TRUE(MatchesWhole(Compile("[^\\s\\S]*"), ""));
}

TEST(RegexToGbnfTest, ABraceThatIsNoQuantifierIsALiteral) {
  // ECMAScript (without the u flag) and Python read these as literal braces.
  EXPECT_TRUE(MatchesWhole(Compile("a{"), "a{"));
  EXPECT_TRUE(MatchesWhole(Compile("a{x}"), "a{x}"));
  EXPECT_TRUE(MatchesWhole(Compile("a{,2}"), "a{,2}"));
  EXPECT_FALSE(MatchesWhole(Compile("a{,2}"), "aa"));
  EXPECT_TRUE(MatchesWhole(Compile("{}"), "{}"));
  EXPECT_TRUE(MatchesWhole(Compile("a}"), "a}"));
  EXPECT_TRUE(MatchesWhole(Compile("a{1,2"), "a{1,2"));
  EXPECT_TRUE(MatchesWhole(Compile("x{2}{"), "xx{"));
}

TEST(RegexToGbnfTest, RefusesWhatAGrammarCannotSayNamingItsOffset) {
  struct Refusal {
    std::string regex;
    std::string says;
    int offset;
  };
  for (const Refusal& r : std::vector<Refusal>{
           {"(a)\\1", "backreference \\1", 3},
           {"(?<n>a)\\k<n>", "backreference \\k", 7},
           {"(?P<n>a)(?P=n)", "backreference (?P=", 8},
           {"a(?=b)", "lookahead (?=", 1},
           {"a(?!b)", "negative lookahead (?!", 1},
           {"(?<=a)b", "lookbehind (?<=", 0},
           {"(?<!a)b", "negative lookbehind (?<!", 0},
           {"a^b", "anchor ^", 1},
           {"(^a)", "anchor ^", 1},
           {"a$b", "anchor $", 1},
           {"a|$b", "anchor $", 2},
           {"\\bfoo", "word boundary \\b", 0},
           {"a\\B", "word boundary \\B", 1},
           {"(ab", "unterminated group", 0},
           {"a(b(c)", "unterminated group", 1},
           {"ab)", "unbalanced ')'", 2},
           {"[ab", "unterminated class", 0},
           {"a[^", "unterminated class", 1},
           {"*a", "nothing to repeat for '*'", 0},
           {"a**", "nothing to repeat for '*'", 2},
           {"a|+b", "nothing to repeat for '+'", 2},
           {"(?b", "inline flags", 0},
           {"^*", "nothing to repeat for '*'", 1},
           {"{2}", "nothing to repeat for '{2}'", 0},
           {"a{2}{3}", "nothing to repeat for '{3}'", 4},
           {"a*+", "nothing to repeat for '+'", 2},
           {"a{3,1}", "{m,n} with m > n", 1},
           {"a{1001}", "bound 1001 past max_repeat 1000", 1},
           {"a{2,99999999999999}", "past max_repeat", 1},
           {"(?i)abc", "inline flags (?i", 0},
           {"a(?s:b)", "inline flags (?s", 1},
           {"(?#note)", "comment group", 0},
           {"(?>a)", "atomic group", 0},
           {"(?<>a)", "invalid group name", 0},
           {"\xC3(", "invalid UTF-8", 0},
           {"ab\xFF", "invalid UTF-8", 2},
           {"a\xED\xA0\x80", "invalid UTF-8", 1},  // a surrogate
           {"[a\xC0\x80]", "invalid UTF-8", 2},    // overlong
           {"a\\", "'\\' at the end", 1},
           {"\\q", "unsupported escape \\q", 0},
           {"\\A", "unsupported escape \\A", 0},
           {"x\\p{L}", "Unicode property \\p", 1},
           {"[]a]", "']' first in a class", 1},
           {"[^]", "']' first in a class", 2},
           {"[z-a]", "runs backwards", 2},
           {"[\\d-z]", "class escape as a range end", 3},
           {"[a-\\w]", "class escape as a range end", 2},
           {"\\x4", "\\x without 2 hex digits", 0},
           {"\\u12G4", "\\u without 4 hex digits", 0},
           {"\\uD800", "lone surrogate", 0},
           {"a\\uDE00", "lone surrogate", 1},
           {"\\01", "octal escape", 0},
           {"[\\1]", "backreference \\1", 1},
       }) {
    SCOPED_TRACE(r.regex);
    absl::StatusOr<std::string> text = RegexToGbnf(r.regex, "re");
    ASSERT_FALSE(text.ok()) << *text;
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(text.status().message()), HasSubstr(r.says));
    EXPECT_THAT(std::string(text.status().message()),
                HasSubstr(absl::StrCat("at offset ", r.offset)));
  }
  const std::string deep = std::string(101, '(') + std::string(101, ')');
  EXPECT_THAT(std::string(RegexToGbnf(deep, "re").status().message()),
              HasSubstr("nested deeper than 100 at offset 100"));
  EXPECT_NE(Compile(std::string(100, '(') + "a" + std::string(100, ')')), nullptr);
  EXPECT_THAT(std::string(RegexToGbnf("a", "no spaces").status().message()),
              HasSubstr("rule name"));
  EXPECT_FALSE(RegexToGbnf("a", "").ok());
}

TEST(RegexToGbnfTest, MaxRepeatBoundsEveryCount) {
  RegexOptions options;
  options.max_repeat = 5;
  EXPECT_TRUE(RegexToGbnf("a{5}", "re", options).ok());
  EXPECT_TRUE(RegexToGbnf("a{0,5}", "re", options).ok());
  EXPECT_TRUE(RegexToGbnf("a{3,}", "re", options).ok());
  EXPECT_TRUE(RegexToGbnf("a*", "re", options).ok());  // unbounded is no count
  for (const char* regex : {"a{6}", "a{2,6}", "a{6,}", "(b|a{1,9})"}) {
    const absl::Status s = RegexToGbnf(regex, "re", options).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << regex;
    EXPECT_THAT(std::string(s.message()), HasSubstr("past max_repeat 5")) << regex;
  }
}

TEST(RegexToGbnfTest, BoundedRepetitionIsWrittenOnceWithItsCount) {
  const std::string text = *RegexToGbnf("[0-9]{1,1000}x{3}(ab|c){2,}", "re");
  EXPECT_THAT(text, HasSubstr("{1,1000}"));
  EXPECT_THAT(text, HasSubstr("{3}"));
  EXPECT_THAT(text, HasSubstr("{2,}"));
  EXPECT_LT(text.size(), 80u) << text;
  const auto g = Compile("[0-9]{1,1000}");
  EXPECT_TRUE(MatchesWhole(g, std::string(1000, '7')));
  EXPECT_FALSE(MatchesWhole(g, std::string(1001, '7')));
  // A JSON-escaped class is one helper rule however often it is used.
  RegexOptions json;
  json.json_string = true;
  const std::string dots = *RegexToGbnf(".{3}.+[^a]?.", "re", json);
  EXPECT_EQ(std::count(dots.begin(), dots.end(), '\n'), 3) << dots;  // re, `.`, [^a]
}

TEST(RegexToGbnfTest, DefinesTheRuleAndOnlyHelpersPrefixedWithIt) {
  RegexOptions json;
  json.json_string = true;
  for (const std::string& regex : {"a", ".*[^\"]\\W", "(a|b)*\\x1a"}) {
    const std::string text = *RegexToGbnf(regex, "my_rule-1", json);
    std::vector<std::string> names;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      names.emplace_back(line.substr(0, line.find(" ::= ")));
    }
    ASSERT_FALSE(names.empty());
    EXPECT_EQ(names[0], "my_rule-1") << text;
    for (size_t i = 1; i < names.size(); ++i) EXPECT_THAT(names[i], StartsWith("my_rule-1-"));
  }
  // Two regexes' rules side by side in one grammar do not collide.
  const std::string text =
      "root ::= p \"|\" q\n" + *RegexToGbnf(".+", "p", json) + *RegexToGbnf("[^a]+", "q", json);
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileGbnf(text);
  ASSERT_TRUE(g.ok()) << g.status() << "\n" << text;
  EXPECT_TRUE(MatchesWhole(*g, "\\\"x|b\\n"));
  EXPECT_FALSE(MatchesWhole(*g, "x|a"));
}

TEST(RegexToGbnfTest, RepetitionsOfNestedOptionalPartsStayLinear) {
  // Taking the empty string out of a repeated body reuses its parts: written naively, the
  // text would double with each level of nesting (std::regex cannot even compile these; the
  // shallow ones are among Cases()).
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "(a?";
  for (int i = 0; i < 100; ++i) deep += "b?)";
  deep += "*";
  std::string deeper;
  for (int i = 0; i < 50; ++i) deeper += "((a?";
  for (int i = 0; i < 50; ++i) deeper += "b?)?c?)*";
  std::string wide = "(";
  for (int i = 0; i < 2000; ++i) wide += i % 2 ? "a?" : "b?";
  wide += ")*";
  for (const std::string& regex : {deep, deeper, wide}) {
    const std::string text = *RegexToGbnf(regex, "re");
    EXPECT_LT(text.size(), 40 * regex.size()) << regex;
    EXPECT_NE(Compile(regex), nullptr);
  }
  // (So ambiguous a grammar passes the matcher's bound on stacks on longer inputs.)
  const auto g = Compile(deep);
  for (const char* yes : {"", "a", "ab", "ba"}) EXPECT_TRUE(MatchesWhole(g, yes)) << yes;
  EXPECT_FALSE(MatchesWhole(g, "ac"));
}

TEST(RegexToGbnfTest, EmptyRegexMatchesOnlyTheEmptyString) {
  for (const char* regex : {"", "^$", "^", "$", "()", "(?:)", "|", "x{0}"}) {
    const auto g = Compile(regex);
    ASSERT_NE(g, nullptr) << regex;
    EXPECT_TRUE(MatchesWhole(g, "")) << regex;
    EXPECT_FALSE(MatchesWhole(g, "x")) << regex;
  }
}

}  // namespace
}  // namespace tpserve::grammar
