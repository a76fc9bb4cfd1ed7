#include "server/model/tokenizer/incremental_decoder.h"

#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::model {
namespace {

// SentencePiece-style tokenizer.json: "▁", "a", "▁a" and the 256 byte tokens (id 3 + b),
// special "<s>" (id 259), Llama 2 normalizer and decoder.
std::unique_ptr<Tokenizer> SpmTokenizer() {
  std::vector<std::string> vocab = {R"("▁": 0)", R"("a": 1)", R"("▁a": 2)"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab.push_back(absl::StrCat("\"", name, "\": ", 3 + b));
  }
  vocab.emplace_back(R"("<s>": 259)");
  const std::string json = absl::StrCat(
      R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {)", absl::StrJoin(vocab, ","),
      R"(}, "merges": ["▁ a"]},
      "added_tokens": [{"id": 259, "content": "<s>", "special": true}],
      "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
      "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}})");
  auto tok = Tokenizer::FromJson(json);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

// Feeds `ids` one by one; every chunk must be valid UTF-8 and the total must equal Decode.
std::string Stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special,
                   std::vector<std::string>* chunks) {
  IncrementalDecoder decoder(tok, skip_special);
  std::string all;
  for (int32_t id : ids) {
    auto chunk = decoder.Feed(id);
    EXPECT_TRUE(chunk.ok()) << chunk.status();
    EXPECT_TRUE(IsValidUtf8(*chunk)) << "partial character emitted";
    chunks->push_back(*chunk);
    all += *chunk;
  }
  const std::string rest = decoder.Flush();
  chunks->push_back(rest);
  all += rest;
  EXPECT_EQ(all, *tok.Decode(ids, skip_special));
  return all;
}

TEST(IncrementalDecoderTest, ByteFallbackEmojiIsHeldUntilComplete) {
  auto tok = SpmTokenizer();
  ASSERT_NE(tok, nullptr);
  // "a 😀 你": the emoji (4 bytes) and CJK (3 bytes) come as byte tokens.
  auto ids = tok->Encode("a \xF0\x9F\x98\x80 \xE4\xBD\xA0", true);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 1u + 1u + 4u + 1u + 3u);  // ▁a ▁ F0 9F 98 80 ▁ E4 BD A0
  std::vector<std::string> chunks;
  EXPECT_EQ(Stream(*tok, *ids, false, &chunks), "a \xF0\x9F\x98\x80 \xE4\xBD\xA0");
  // The leading "▁" of the first token is dropped; nothing shows until the 4th emoji byte.
  EXPECT_EQ(chunks[0], "a");
  EXPECT_EQ(chunks[1], " ");
  EXPECT_EQ(chunks[2], "");
  EXPECT_EQ(chunks[3], "");
  EXPECT_EQ(chunks[4], "");
  EXPECT_EQ(chunks[5], "\xF0\x9F\x98\x80");
  EXPECT_EQ(chunks[9], "\xE4\xBD\xA0");
}

TEST(IncrementalDecoderTest, SpecialTokensAndLeadingSpace) {
  auto tok = SpmTokenizer();
  ASSERT_NE(tok, nullptr);
  std::vector<std::string> chunks;
  EXPECT_EQ(Stream(*tok, {259, 2, 2}, true, &chunks), "a a");
  EXPECT_EQ(Stream(*tok, {259, 2, 2}, false, &chunks), "<s> a a");
}

TEST(IncrementalDecoderTest, IncompleteTailFlushesAsReplacement) {
  auto tok = SpmTokenizer();
  ASSERT_NE(tok, nullptr);
  IncrementalDecoder decoder(*tok, false);
  EXPECT_EQ(*decoder.Feed(3 + 0xF0), "");
  EXPECT_EQ(*decoder.Feed(3 + 0x9F), "");
  EXPECT_EQ(decoder.pending_bytes(), 2u);
  // A byte that cannot continue the sequence: the broken prefix is replaced, "A" follows.
  EXPECT_EQ(*decoder.Feed(3 + 'A'),
            "\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(*decoder.Feed(3 + 0xE4), "");
  EXPECT_EQ(decoder.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  EXPECT_EQ(decoder.Feed(999).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IncrementalDecoderTest, SmolLmByteLevelPiecesThatSplitCharacters) {
  const std::string path =
      std::string(TPSERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::ifstream(path)) GTEST_SKIP() << path << " is missing (scripts/fetch-model.sh)";
  auto tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // ZWJ family, skin tone, CJK, a rare 4-byte CJK extension character, combining marks.
  const std::string text =
      "Family: \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
      "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xE6\x9C\xBA\xE5\x99\xA8 \xF0\xA4\x8C\x81 e\xCC\x81";
  auto ids = (*tok)->Encode(text, false);
  ASSERT_TRUE(ids.ok());
  int split = 0;  // tokens whose bytes are not whole characters
  for (int32_t id : *ids) split += IsValidUtf8((*tok)->TokenBytes(id)) ? 0 : 1;
  EXPECT_GT(split, 0) << "the text should make byte-level pieces split characters";
  std::vector<std::string> chunks;
  EXPECT_EQ(Stream(**tok, *ids, false, &chunks), text);
}

}  // namespace
}  // namespace tpserve::model
