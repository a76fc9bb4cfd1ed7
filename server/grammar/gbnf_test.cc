#include "server/grammar/gbnf.h"

#include <algorithm>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/grammar/matcher.h"

namespace tpserve::grammar {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const Grammar> Compile(const std::string& text) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileGbnf(text);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? *g : nullptr;
}

TEST(GbnfTest, LiteralsClassesGroupsAndRepetition) {
  const auto g = Compile(R"(
    root ::= "say " word ("," " "? word)* "!"?   # a comment
    word ::= [a-z]+ | "\"" [^"\n]{1,3} "\""
  )");
  ASSERT_NE(g, nullptr);
  for (const char* yes : {"say hi", "say hi, yo,there!", "say \"x\"", "say \"é☃\""}) {
    EXPECT_TRUE(MatchesWhole(g, yes)) << yes;
  }
  for (const char* no : {"say ", "say Hi", "say hi,", "say \"\"", "say \"abcd\"", "say hi!!"}) {
    EXPECT_FALSE(MatchesWhole(g, no)) << no;
  }
}

TEST(GbnfTest, ClassesAreCodePointsMatchedAsUtf8) {
  const auto g = Compile(R"(root ::= [a-c\u00e9\u4e00-\u9fff\U0001F600-\U0001F64F]+)");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(MatchesWhole(g, "abé中文😀"));
  EXPECT_FALSE(MatchesWhole(g, "d"));
  EXPECT_FALSE(MatchesWhole(g, "\xC3"));  // half of é
  const auto any = Compile("root ::= .{2}");
  EXPECT_TRUE(MatchesWhole(any, "a\xF0\x9F\x98\x80"));
  EXPECT_FALSE(MatchesWhole(any,
                            "\xED\xA0\x80"
                            "a"));  // a surrogate is not a code point
  EXPECT_FALSE(MatchesWhole(any,
                            "\xFF"
                            "a"));
  const auto negated = Compile(R"(root ::= [^a-z])");
  EXPECT_TRUE(MatchesWhole(negated, "☃"));
  EXPECT_FALSE(MatchesWhole(negated, "q"));
}

TEST(GbnfTest, BoundedRepetitionCountsExactly) {
  const auto g = Compile(R"(root ::= "a"{2,4} "b"{3} "c"{1,})");
  for (int a = 0; a < 7; ++a) {
    const std::string s = std::string(a, 'a') + "bbbc";
    EXPECT_EQ(MatchesWhole(g, s), a >= 2 && a <= 4) << s;
  }
  EXPECT_FALSE(MatchesWhole(g, "aabbb"));
}

TEST(GbnfTest, RecursionThatConsumesFirstIsAllowed) {
  const auto g = Compile(R"(
root ::= value
value ::= "[" (value ("," value)*)? "]" | [0-9]
)");
  EXPECT_TRUE(MatchesWhole(g, "[1,[2,[]],[[3]]]"));
  EXPECT_FALSE(MatchesWhole(g, "[1,]"));
  EXPECT_FALSE(MatchesWhole(g, "[[1]"));
}

TEST(GbnfTest, RefusesWhatCannotBeMatchedOrIsPastTheBounds) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"root ::= a\na ::= a \"x\" | \"y\"", "rule 'a' is left-recursive"},
           {"root ::= b\nb ::= c \"x\"\nc ::= b?", "left-recursive"},
           {"root ::= (\"a\"?)*", "left-recursive"},
           {"root ::= missing", "rule 'missing' is used but not defined"},
           {"start ::= \"a\"", "no rule 'root'"},
           {"root ::= \"a", "unterminated literal"},
           {"root ::= [a", "unterminated class"},
           {"root ::= [z-a]", "runs backwards"},
           {"root ::= (\"a\"", "expected ')'"},
           {"root ::= \"a\"{3,1}", "n < m"},
           {"root ::= \"a\"{99999999}", "past the limit"},
           {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
           {"root ::= \"\\u12\"", "hex digit"},
           {"root ::= \"\\uD800\"", "not a Unicode scalar"},
           {"root := \"a\"", "expected '::='"},
       }) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileGbnf(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(g.status().message()), HasSubstr(c.says)) << c.text;
  }
  GrammarLimits small;
  small.max_rules = 10;
  EXPECT_THAT(std::string(CompileGbnf("root ::= \"a\"{0,50}", small).status().message()),
              HasSubstr("more than 10 rules"));
  std::string deep = "root ::= ";
  for (int i = 0; i < 300; ++i) deep += "(";
  EXPECT_THAT(std::string(CompileGbnf(deep).status().message()), HasSubstr("nested deeper"));
}

TEST(GbnfTest, LiteralQuotingRoundTrips) {
  const std::string odd = "a\"b\\c\nd\te\x01☃";
  const auto g = Compile("root ::= " + GbnfLiteral(odd));
  EXPECT_TRUE(MatchesWhole(g, odd));
  EXPECT_FALSE(MatchesWhole(g, "a\"b"));
}

TEST(GbnfTest, PrefixRuleNamesRenamesRulesNotLiteralsClassesOrCounts) {
  const std::string text = "root ::= \"root\" [a-z] x{2,3} # root\nx ::= \"\\\"x\" | root-2\n";
  EXPECT_EQ(PrefixRuleNames(text, "t0-"),
            "t0-root ::= \"root\" [a-z] t0-x{2,3} # root\nt0-x ::= \"\\\"x\" | t0-root-2\n");
  const auto g =
      Compile("root ::= t0-root\n" + PrefixRuleNames("root ::= \"a\" x\nx ::= \"b\"{2}\n", "t0-"));
  EXPECT_TRUE(MatchesWhole(g, "abb"));
}

TEST(MatcherTest, AcceptsByteByByteAndKnowsWhereItMayEnd) {
  const auto g = Compile(R"(root ::= "ab" | "abc" "d"?)");
  Matcher m(g);
  EXPECT_FALSE(m.CanEnd());
  EXPECT_FALSE(m.Accept('x'));
  EXPECT_TRUE(m.Accept('a'));
  EXPECT_TRUE(m.Accept('b'));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_FALSE(m.Done());
  EXPECT_TRUE(m.AcceptBytes("cd"));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_TRUE(m.Done());
  EXPECT_FALSE(m.AcceptBytes("d"));
}

TEST(MatcherTest, RepetitionDoesNotGrowTheStacks) {
  const auto g = Compile(R"(root ::= "[" [a-z]* "]")");
  Matcher m(g);
  auto deepest = [&m] {
    size_t d = 0;
    for (const Stack& s : m.stacks()) d = std::max(d, s.size());
    return d;
  };
  ASSERT_TRUE(m.AcceptBytes("[q"));
  const size_t depth = deepest();
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(m.Accept('q'));
  EXPECT_EQ(deepest(), depth);
  EXPECT_TRUE(m.Accept(']'));
  EXPECT_TRUE(m.CanEnd());
}

TEST(MatcherTest, ABoundOnStacksRejectsRatherThanBlowsUp) {
  // Every split of a run of a's is a parse: the stacks would double with each byte.
  const auto g = Compile(R"(
root ::= x
x ::= "a" x | "a" y | "a"
y ::= "a" x | "a" y | "a"
)");
  Matcher m(g, /*max_stacks=*/64);
  int taken = 0;
  while (taken < 100 && m.Accept('a')) ++taken;
  EXPECT_EQ(taken, 100);  // deduplicated: identical stacks are kept once
}

}  // namespace
}  // namespace tpserve::grammar
