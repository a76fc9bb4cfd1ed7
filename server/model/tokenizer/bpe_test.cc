#include "server/model/tokenizer/bpe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tpserve::model {
namespace {

using ::testing::ElementsAre;

TEST(MergeTableTest, LowestRankFirstThenLeftmost) {
  auto vocab = Vocab::FromTokens({"a", "b", "c", "ab", "bc", "abc", "aa", "aaa"}, -1);
  // "b c" outranks "a b": "abc" -> a + bc, then no "a bc" rule.
  auto table = MergeTable::Create(*vocab, {{"b", "c"}, {"a", "b"}, {"a", "a"}});
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<int32_t> ids = {0, 1, 2};
  table->Merge(&ids);
  EXPECT_THAT(ids, ElementsAre(0, 4));
  // Equal ranks: leftmost first, so "aaa" -> "aa" + "a".
  ids = {0, 0, 0};
  table->Merge(&ids);
  EXPECT_THAT(ids, ElementsAre(6, 0));
}

TEST(MergeTableTest, ChainsMerges) {
  auto vocab = Vocab::FromTokens({"a", "b", "c", "ab", "abc"}, -1);
  auto table = MergeTable::Create(*vocab, {{"a", "b"}, {"ab", "c"}});
  ASSERT_TRUE(table.ok());
  std::vector<int32_t> ids = {0, 1, 2, 0, 1};
  table->Merge(&ids);
  EXPECT_THAT(ids, ElementsAre(4, 3));
}

TEST(MergeTableTest, RuleOutsideVocabularyIsAnError) {
  auto vocab = Vocab::FromTokens({"a", "b"}, -1);
  EXPECT_EQ(MergeTable::Create(*vocab, {{"a", "b"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MergeLinesTest, SplitsAtFirstSpace) {
  auto rules = ParseMergeLines({"a b", "\xC4\xA0 t"});
  ASSERT_TRUE(rules.ok());
  EXPECT_EQ((*rules)[1].first, "\xC4\xA0");
  EXPECT_FALSE(ParseMergeLines({"ab"}).ok());
}

// Byte-level: "Ġ" (U+0120) is the space byte.
TEST(ByteLevelBpeTest, MergesWithinPreTokenizedPieces) {
  std::vector<std::string> tokens;
  for (char c = 'a'; c <= 'z'; ++c) tokens.emplace_back(1, c);
  tokens.emplace_back("\xC4\xA0");    // 26: Ġ
  tokens.emplace_back("\xC4\xA0h");   // 27
  tokens.emplace_back("\xC4\xA0hi");  // 28
  tokens.emplace_back("hi");          // 29
  auto vocab = Vocab::FromTokens(tokens, -1);
  auto bpe = NewByteLevelBpe(vocab, {{"\xC4\xA0", "h"}, {"\xC4\xA0h", "i"}, {"h", "i"}},
                             PreTokenizerType::kGpt2, false);
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  std::vector<int32_t> ids;
  (*bpe)->EncodeSegment("hi hi", true, &ids);
  EXPECT_THAT(ids, ElementsAre(29, 28));
  EXPECT_EQ((*bpe)->TokenBytes(28), " hi");
  // Bytes missing from the vocabulary (here 'A') are dropped when there is no unk, and
  // their neighbours then merge, as in Hugging Face's BPE.
  ids.clear();
  (*bpe)->EncodeSegment("hAi", true, &ids);
  EXPECT_THAT(ids, ElementsAre(29));
}

SentencePieceOptions Llama2Options() { return SentencePieceOptions{}; }

std::shared_ptr<Vocab> SpmVocab() {
  std::vector<std::string> tokens = {"<unk>", "\xE2\x96\x81",  "h",
                                     "i",     "\xE2\x96\x81h", "\xE2\x96\x81hi"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.emplace_back(name);  // id 6 + b
  }
  return Vocab::FromTokens(tokens, 0);
}

TEST(SentencePieceBpeTest, RankMergesAndByteFallback) {
  auto bpe = NewSentencePieceBpeWithMerges(
      SpmVocab(), {{"\xE2\x96\x81", "h"}, {"\xE2\x96\x81h", "i"}}, Llama2Options());
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  std::vector<int32_t> ids;
  (*bpe)->EncodeSegment("hi \xE2\x82\xAC", true, &ids);  // "▁hi▁€": € falls back to 3 bytes
  EXPECT_THAT(ids, ElementsAre(5, 1, 6 + 0xE2, 6 + 0x82, 6 + 0xAC));
  EXPECT_EQ((*bpe)->TokenBytes(6 + 0x41), "A");
  EXPECT_EQ((*bpe)->TokenBytes(5), " hi");
  EXPECT_TRUE((*bpe)->StripsLeadingSpace());
}

TEST(SentencePieceBpeTest, UnknownWithoutByteFallbackFusesToOneUnk) {
  SentencePieceOptions options;
  options.byte_fallback = false;
  options.fuse_unk = true;
  options.prepend = SentencePieceOptions::Prepend::kNever;
  auto bpe = NewSentencePieceBpeWithMerges(SpmVocab(), {}, options);
  ASSERT_TRUE(bpe.ok());
  std::vector<int32_t> ids;
  (*bpe)->EncodeSegment("h\xE2\x82\xAC\xE2\x82\xACi", true, &ids);
  EXPECT_THAT(ids, ElementsAre(2, 0, 3));
}

TEST(SentencePieceBpeTest, ScoreMergesPreferHighestScore) {
  // "▁hi" reachable as (▁h)+i or ▁+(hi); scores decide which pair merges first.
  std::vector<std::string> tokens = {"<unk>", "\xE2\x96\x81",  "h", "i", "\xE2\x96\x81h",
                                     "hi",    "\xE2\x96\x81hi"};
  auto vocab = Vocab::FromTokens(tokens, 0);
  std::vector<float> scores = {0, 0, 0, 0, -5, -1, -2};
  SentencePieceOptions options;
  options.byte_fallback = false;
  auto bpe = NewSentencePieceBpeWithScores(vocab, scores, options);
  ASSERT_TRUE(bpe.ok());
  std::vector<int32_t> ids;
  (*bpe)->EncodeSegment("hi", true, &ids);
  EXPECT_THAT(ids, ElementsAre(6));
  ids.clear();
  (*bpe)->EncodeSegment("hih", false, &ids);  // ▁ + hi + h: "▁hi" then "h"
  EXPECT_THAT(ids, ElementsAre(6, 2));
  EXPECT_FALSE(NewSentencePieceBpeWithScores(vocab, {1.0f}, options).ok());
}

}  // namespace
}  // namespace tpserve::model
