#include "server/grammar/token_constraint.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/grammar/compiled_grammar.h"
#include "server/grammar/regex_to_gbnf.h"

namespace tpserve::grammar {
namespace {

using ::testing::HasSubstr;

// A toy vocabulary: ids 0..6 are text, 7 is EOS (special), 8 a stop token.
const std::vector<std::string> kVocab = {"a", "b", "ab", "ba", "c", "abc", "", "</s>", "!"};

class TokenConstraintTest : public ::testing::Test {
 protected:
  TokenConstraint Make(const std::string& regex) {
    std::vector<bool> never(kVocab.size(), false);
    never[7] = true;
    auto trie = std::make_shared<const TokenTrie>(kVocab, never, /*eos_id=*/7);
    GrammarCache cache(trie);
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g =
        cache.Get(GrammarKind::kRegex, regex);
    EXPECT_TRUE(g.ok()) << g.status();
    return TokenConstraint(*g, {7, 8});
  }

  // The allowed ids of the current mask.
  static std::vector<int> Allowed(const TokenConstraint& c) {
    std::string bits;
    EXPECT_TRUE(c.Mask(absl::InfiniteFuture(), &bits).ok());
    EXPECT_EQ(bits.size(), (kVocab.size() + 7) / 8);
    std::vector<int> ids;
    for (size_t id = 0; id < kVocab.size(); ++id) {
      if ((static_cast<uint8_t>(bits[id / 8]) >> (id % 8)) & 1) ids.push_back(static_cast<int>(id));
    }
    return ids;
  }
};

TEST_F(TokenConstraintTest, MaskFollowsTheGrammarAndEndTokensComeWhereItMayEnd) {
  TokenConstraint c = Make("(ab)+c?");
  EXPECT_THAT(Allowed(c), ::testing::ElementsAre(0, 2, 5));  // a, ab, abc
  ASSERT_TRUE(c.Accept(2, "ab").ok());
  // After "ab": more "ab", or "c" (the end), or an end token.
  EXPECT_THAT(Allowed(c), ::testing::ElementsAre(0, 2, 4, 5, 7, 8));
  EXPECT_FALSE(c.Ended());
  ASSERT_TRUE(c.Accept(4, "c").ok());
  EXPECT_TRUE(c.Ended());  // nothing can follow "c"
}

TEST_F(TokenConstraintTest, RefusedTokensLeaveTheStateAsItWas) {
  TokenConstraint c = Make("ab");
  EXPECT_THAT(c.Accept(1, "b").message(), HasSubstr("not allowed by the grammar"));
  EXPECT_THAT(c.Accept(7, "").message(), HasSubstr("cannot end"));
  EXPECT_THAT(c.Accept(6, "").message(), HasSubstr("not allowed"));  // an empty token
  ASSERT_TRUE(c.Accept(0, "a").ok());
  ASSERT_TRUE(c.Accept(1, "b").ok());
  EXPECT_TRUE(c.Ended());
}

TEST_F(TokenConstraintTest, AnEndTokenEndsIt) {
  TokenConstraint c = Make("a*");
  EXPECT_THAT(Allowed(c), ::testing::ElementsAre(0, 7, 8));
  ASSERT_TRUE(c.Accept(8, "!").ok());  // the stop token ends, it is not text
  EXPECT_TRUE(c.Ended());
  EXPECT_THAT(c.Accept(0, "a").message(), HasSubstr("has ended"));
}

TEST(TokenConstraintDeadlineTest, APastDeadlineIsResourceExhausted) {
  // Every string of 1 to 8 of a, b, c: enough trie nodes for the walk to look at the clock.
  std::vector<std::string> vocab = {""};
  for (size_t i = 0; i < vocab.size() && vocab.size() < 9841; ++i) {
    if (vocab[i].size() < 8) {
      for (char ch : {'a', 'b', 'c'}) vocab.emplace_back(vocab[i] + ch);
    }
  }
  vocab.emplace_back("</s>");
  std::vector<bool> never(vocab.size(), false);
  never.back() = true;
  auto trie = std::make_shared<const TokenTrie>(vocab, never, vocab.size() - 1);
  GrammarCache cache(trie);
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g =
      cache.Get(GrammarKind::kRegex, "[a-c]{0,50}");
  ASSERT_TRUE(g.ok()) << g.status();
  std::string bits;
  EXPECT_EQ(TokenConstraint(*g, {}).Mask(absl::InfinitePast(), &bits).code(),
            absl::StatusCode::kResourceExhausted);
  // With time, every text token is allowed.
  ASSERT_TRUE(TokenConstraint(*g, {}).Mask(absl::InfiniteFuture(), &bits).ok());
  for (size_t id = 1; id + 1 < vocab.size(); ++id) {
    ASSERT_TRUE((static_cast<uint8_t>(bits[id / 8]) >> (id % 8)) & 1) << vocab[id];
  }
}

}  // namespace
}  // namespace tpserve::grammar
