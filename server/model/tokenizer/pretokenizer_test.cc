#include "server/model/tokenizer/pretokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tpserve::model {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(std::string_view name, std::string_view text) {
  auto type = PreTokenizerTypeFromName(name);
  EXPECT_TRUE(type.ok()) << type.status();
  auto pre = PreTokenizer::Create(*type);
  EXPECT_TRUE(pre.ok()) << pre.status();
  std::vector<std::string_view> pieces;
  (*pre)->Split(text, &pieces);
  return {pieces.begin(), pieces.end()};
}

TEST(PreTokenizerTest, Gpt2) {
  EXPECT_THAT(Split("gpt2", "Hello world's  12345!!  \n x"),
              ElementsAre("Hello", " world", "'s", " ", " 12345", "!!", "  \n", " x"));
}

TEST(PreTokenizerTest, SmolLmSplitsEveryDigit) {
  EXPECT_THAT(Split("smollm", "ab 123"), ElementsAre("ab", " ", "1", "2", "3"));
}

TEST(PreTokenizerTest, Llama3GroupsThreeDigits) {
  EXPECT_THAT(Split("llama3", "x 12345 I'M"), ElementsAre("x", " ", "123", "45", " I", "'M"));
}

TEST(PreTokenizerTest, NelIsWhitespaceAsInOniguruma) {
  // U+0085 is Unicode White_Space: "a" then the space run, not a punctuation piece.
  EXPECT_THAT(Split("gpt2",
                    "a\xC2\x85"
                    "b"),
              ElementsAre("a", "\xC2\x85", "b"));
}

TEST(PreTokenizerTest, NoneKeepsTextWhole) {
  EXPECT_THAT(Split("none", "a b  c"), ElementsAre("a b  c"));
  EXPECT_TRUE(Split("gpt2", "").empty());
}

TEST(PreTokenizerTest, UnknownTypeIsAnErrorNamingIt) {
  auto pre = PreTokenizerTypeFromName("deepseek-coder-v9");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(pre.status().message()), ::testing::HasSubstr("deepseek-coder-v9"));
}

}  // namespace
}  // namespace tpserve::model
