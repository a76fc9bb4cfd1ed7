#include "server/model/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A tiny byte-level tokenizer.json: the 256 byte characters, "Ġh", "Ġhi", "hi", and added
// tokens "<s>" (special), "<|a|>" and "<|a|b>" (special), "NEW" (not special, rstrip).
std::string TinyByteLevelJson() {
  std::vector<std::string> entries;
  int id = 0;
  auto add = [&](const std::string& token) {
    std::string escaped;
    for (unsigned char c : token) {
      if (c == '"' || c == '\\') {
        escaped += '\\';
        escaped += static_cast<char>(c);
      } else {
        escaped += static_cast<char>(c);
      }
    }
    entries.push_back(absl::StrCat("\"", escaped, "\": ", id++));
  };
  // bytes_to_unicode in byte order: printable bytes map to themselves.
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const char32_t cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    add(s);
  }
  add("\xC4\xA0h");   // 256
  add("\xC4\xA0hi");  // 257
  add("hi");          // 258
  return absl::StrCat(R"({"model": {"type": "BPE", "vocab": {)", absl::StrJoin(entries, ", "),
                      R"(}, "merges": ["Ġ h", "Ġh i", ["h", "i"]]},
      "added_tokens": [
        {"id": 259, "content": "<s>", "special": true},
        {"id": 260, "content": "<|a|>", "special": true},
        {"id": 261, "content": "<|a|b>", "special": true},
        {"id": 262, "content": "NEW", "special": false, "rstrip": true}],
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "decoder": {"type": "ByteLevel"},
      "post_processor": {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}]}})");
}

std::unique_ptr<Tokenizer> Tiny() {
  auto tok = Tokenizer::FromJson(TinyByteLevelJson());
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(TokenizerTest, EncodesAndDecodes) {
  auto tok = Tiny();
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("hi hi", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(258, 257));
  EXPECT_THAT(*tok->Encode("hi", true), ElementsAre(259, 258));  // BOS from the template
  EXPECT_EQ(*tok->Decode(*ids, false), "hi hi");
  EXPECT_EQ(tok->TokenPiece(257), "\xC4\xA0hi");
  EXPECT_EQ(tok->TokenBytes(257), " hi");
}

TEST(TokenizerTest, SplitsAddedTokensLongestFirst) {
  auto tok = Tiny();
  ASSERT_NE(tok, nullptr);
  // "<|a|b>" wins over its prefix "<|a|>"; "<|a" alone is plain text.
  EXPECT_THAT(*tok->Encode("hi<|a|b><|a|>hi<|a", false),
              ElementsAre(258, 261, 260, 258, '<', '|', 'a'));  // byte i has id i here
  // rstrip: "NEW" swallows the whitespace after it.
  EXPECT_THAT(*tok->Encode("NEW   hi", false), ElementsAre(262, 258));
}

TEST(TokenizerTest, LiteralRangesAreEncodedAsPlainText) {
  auto tok = Tiny();
  ASSERT_NE(tok, nullptr);
  // "<|a|>hi<|a|>": the middle token text lies in a literal range, the outer ones do not.
  const std::string text = "<|a|><|a|>hi<|a|>";
  const std::vector<ByteRange> literal = {{5, 12}};
  EXPECT_THAT(*tok->Encode(text, false), ElementsAre(260, 260, 258, 260));
  EXPECT_THAT(*tok->Encode(text, false, literal),
              ElementsAre(260, '<', '|', 'a', '|', '>', 258, 260));
  // A token may not straddle a range's edge either: "<|a|b>" whose "b>" is literal.
  EXPECT_THAT(*tok->Encode("<|a|b>", false, std::vector<ByteRange>{{4, 6}}),
              ElementsAre('<', '|', 'a', '|', 'b', '>'));
  // Ranges out of order or past the text are refused.
  EXPECT_FALSE(tok->Encode(text, false, std::vector<ByteRange>{{6, 8}, {5, 7}}).ok());
  EXPECT_FALSE(tok->Encode(text, false, std::vector<ByteRange>{{0, 99}}).ok());
}

TEST(TokenizerTest, DecodeSkipsSpecialTokensOnRequest) {
  auto tok = Tiny();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = {259, 258, 262, 260};
  EXPECT_EQ(*tok->Decode(ids, false), "<s>hiNEW<|a|>");
  EXPECT_EQ(*tok->Decode(ids, true), "hiNEW");
  EXPECT_TRUE(tok->IsSpecial(259));
  EXPECT_FALSE(tok->IsSpecial(262));
}

TEST(TokenizerTest, InvalidUtf8IsInvalidArgument) {
  auto tok = Tiny();
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("ok\xC3(", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("byte 2"));
}

TEST(TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  auto tok = Tiny();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{1, 263}, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{-1}, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Bytes that are not UTF-8 become U+FFFD: 0xE4 alone (byte token 'ä' + 0x80 offset).
  EXPECT_EQ(*tok->Decode(std::vector<int32_t>{*tok->Encode("\xC3\xA4", false)->begin()}, false),
            "\xEF\xBF\xBD");
}

TEST(TokenizerJsonTest, BadInputsAreErrorsNamingTheProblem) {
  const std::string good = TinyByteLevelJson();
  struct Case {
    std::string json, message;
  };
  std::vector<Case> cases = {
      {"{not json", "not a JSON object"},
      {"[]", "not a JSON object"},
      {R"({"model": {"type": "Unigram", "vocab": []}})", "Unigram"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}}})", "merges"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2}, "merges": []}})", "id 1"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [3]}})", "merge"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]},
           "pre_tokenizer": {"type": "ByteLevel"}})",
       "vocabulary"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "neither"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
           "pre_tokenizer": {"type": "Whitespace"}})",
       "Whitespace"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": 0.1}})", "dropout"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
             {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"},
             {"type": "ByteLevel", "use_regex": false}]}})",
       "Split regex"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
           "pre_tokenizer": {"type": "ByteLevel"}, "added_tokens": [{"content": "x"}]})",
       "no id"},
  };
  for (const Case& c : cases) {
    auto tok = Tokenizer::FromJson(c.json);
    ASSERT_FALSE(tok.ok()) << c.json;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(std::string(tok.status().message()), HasSubstr(c.message)) << c.json;
  }
}

// A GGUF v3 file with the given string/array metadata (no tensors).
class GgufBuilder {
 public:
  GgufBuilder& Str(const std::string& key, const std::string& value) {
    Key(key, 8);
    String(value);
    ++count_;
    return *this;
  }
  GgufBuilder& StrArray(const std::string& key, const std::vector<std::string>& values) {
    Key(key, 9);
    U32(8);
    U64(values.size());
    for (const auto& v : values) String(v);
    ++count_;
    return *this;
  }
  std::string Bytes() const {
    std::string out = "GGUF";
    auto put = [&](uint64_t v, int n) {
      for (int i = 0; i < n; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
    };
    put(3, 4);
    put(0, 8);
    put(count_, 8);
    return out + body_;
  }

 private:
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) body_.push_back(static_cast<char>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) body_.push_back(static_cast<char>(v >> (8 * i)));
  }
  void String(const std::string& s) {
    U64(s.size());
    body_ += s;
  }
  void Key(const std::string& key, uint32_t type) {
    String(key);
    U32(type);
  }
  std::string body_;
  uint64_t count_ = 0;
};

TEST(TokenizerGgufTest, MissingKeysAreNamed) {
  auto check = [](const GgufBuilder& b, const std::string& key) {
    auto gguf = GgufFile::FromBytes(b.Bytes());
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    auto tok = Tokenizer::FromGguf(**gguf);
    ASSERT_FALSE(tok.ok());
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(tok.status().message()), HasSubstr(key));
  };
  check(GgufBuilder(), "tokenizer.ggml.model");
  check(GgufBuilder().Str("tokenizer.ggml.model", "gpt2"), "tokenizer.ggml.tokens");
  check(GgufBuilder().Str("tokenizer.ggml.model", "gpt2").StrArray("tokenizer.ggml.tokens", {"a"}),
        "tokenizer.ggml.merges");
  check(GgufBuilder().Str("tokenizer.ggml.model", "llama").StrArray("tokenizer.ggml.tokens", {"a"}),
        "tokenizer.ggml.scores");
  check(GgufBuilder().Str("tokenizer.ggml.model", "bert").StrArray("tokenizer.ggml.tokens", {"a"}),
        "bert");
  check(GgufBuilder()
            .Str("tokenizer.ggml.model", "gpt2")
            .StrArray("tokenizer.ggml.tokens", {"a", "b", "ab"})
            .StrArray("tokenizer.ggml.merges", {"a b"})
            .Str("tokenizer.ggml.pre", "mystery-pre"),
        "mystery-pre");
}

TEST(TokenizerGgufTest, LoadsAMinimalGpt2Tokenizer) {
  auto gguf = GgufFile::FromBytes(GgufBuilder()
                                      .Str("tokenizer.ggml.model", "gpt2")
                                      .StrArray("tokenizer.ggml.tokens", {"a", "b", "ab"})
                                      .StrArray("tokenizer.ggml.merges", {"a b"})
                                      .Bytes());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(*(*tok)->Encode("abba", false), ElementsAre(2, 1, 0));
}

TEST(TokenizerSmolLmTest, KnownIds) {
  const std::string path =
      std::string(TPSERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::ifstream(path)) GTEST_SKIP() << path << " is missing (scripts/fetch-model.sh)";
  auto tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 49152);
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_FALSE((*tok)->add_bos());
  // Ids from Hugging Face tokenizers for SmolLM2 (digits split one by one).
  EXPECT_THAT(*(*tok)->Encode("Hello world! 12345 <|im_start|>user\n", false),
              ElementsAre(19556, 905, 17, 216, 33, 34, 35, 36, 37, 216, 1, 4093, 198));
  EXPECT_THAT((*tok)->chat_template(), HasSubstr("<|im_start|>"));
}

}  // namespace
}  // namespace tpserve::model
