#include "server/coordinator/text_streamer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "server/model/tokenizer/incremental_decoder.h"
#include "server/model/tokenizer/tokenizer.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::coordinator {
namespace {

using model::Tokenizer;

constexpr char kModel[] = TPSERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The SmolLM2 tokenizer (byte-level BPE), loaded once; null (with a test failure naming the
// error) when it does not load.
const Tokenizer* SmolTokenizer() {
  static const auto* const tokenizer =
      new absl::StatusOr<std::unique_ptr<Tokenizer>>(Tokenizer::Load(kModel));
  if (!tokenizer->ok()) {
    ADD_FAILURE() << tokenizer->status();
    return nullptr;
  }
  return tokenizer->value().get();
}

// The ids of each piece, encoded separately, one id per piece: the tests place token
// boundaries on purpose, and byte-level decoding is plain concatenation.
std::vector<int32_t> OneTokenEach(const Tokenizer& tok, const std::vector<std::string>& pieces) {
  std::vector<int32_t> ids;
  for (const std::string& piece : pieces) {
    auto piece_ids = tok.Encode(piece, /*add_special=*/false);
    EXPECT_TRUE(piece_ids.ok()) << piece_ids.status();
    EXPECT_EQ(piece_ids->size(), 1u) << "\"" << piece << "\" is not one token";
    ids.insert(ids.end(), piece_ids->begin(), piece_ids->end());
  }
  return ids;
}

std::vector<int32_t> Encode(const Tokenizer& tok, const std::string& text) {
  auto ids = tok.Encode(text, /*add_special=*/false);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>();
}

// What one request streamed: each Feed's text (until the stop) and Finish.
struct Streamed {
  std::vector<std::string> deltas;  // one per Feed that was made
  std::vector<size_t> held;         // held_back_bytes() after each Feed
  std::string finish;
  bool stopped = false;
  std::string All() const {
    std::string all;
    for (const std::string& d : deltas) all += d;
    return all + finish;
  }
};

// Feeds `ids` until a stop; then Finish. Every piece of text must be valid UTF-8.
Streamed Stream(const Tokenizer& tok, const std::vector<std::string>& stop,
                const std::vector<int32_t>& ids, bool skip_special = true) {
  TextStreamer streamer(tok, stop, skip_special);
  Streamed out;
  for (int32_t id : ids) {
    auto delta = streamer.Feed(id);
    EXPECT_TRUE(delta.ok()) << delta.status();
    if (!delta.ok()) break;
    EXPECT_TRUE(model::IsValidUtf8(delta->text)) << "split character in \"" << delta->text << "\"";
    out.deltas.push_back(delta->text);
    out.held.push_back(streamer.held_back_bytes());
    EXPECT_EQ(delta->stopped, streamer.stopped());
    if (delta->stopped) break;
  }
  out.finish = streamer.Finish();
  EXPECT_TRUE(model::IsValidUtf8(out.finish));
  out.stopped = streamer.stopped();
  return out;
}

std::string Decode(const Tokenizer& tok, absl::Span<const int32_t> ids) {
  auto text = tok.Decode(ids, /*skip_special=*/true);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

TEST(TextStreamerTest, NoStopStringsStreamsTheDecodedText) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  // Byte-level pieces split the CJK characters and the emoji across tokens.
  const std::vector<int32_t> ids =
      Encode(*tok, "Hello, world! Café, naïve über 😀 日本語 é!\nThe end.");
  const Streamed s = Stream(*tok, {}, ids);
  EXPECT_EQ(s.All(), Decode(*tok, ids));
  EXPECT_EQ(s.deltas.size(), ids.size());
  for (size_t held : s.held) EXPECT_EQ(held, 0u);
  EXPECT_FALSE(s.stopped);
}

TEST(TextStreamerTest, StopStringInsideOneToken) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = OneTokenEach(*tok, {"Hello", ",", " world", "!"});
  const Streamed s = Stream(*tok, {"orl"}, ids);
  // The "o" ending "Hello" may begin "orl": held until "," rules that out.
  EXPECT_EQ(s.deltas, (std::vector<std::string>{"Hell", "o,", " w"}));
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.finish, "");
}

TEST(TextStreamerTest, StopStringSpanningTwoTokens) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = OneTokenEach(*tok, {"hello", " world", "!"});
  const Streamed s = Stream(*tok, {"lo wor"}, ids);
  // "lo" may begin the stop string: held back until " world" completes it.
  EXPECT_EQ(s.deltas, (std::vector<std::string>{"hel", ""}));
  EXPECT_EQ(s.held[0], 2u);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.All(), "hel");
}

TEST(TextStreamerTest, StopStringSpanningThreeTokens) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = OneTokenEach(*tok, {"Hello", ",", " world", "!"});
  const Streamed s = Stream(*tok, {"llo, wo"}, ids);
  EXPECT_EQ(s.deltas, (std::vector<std::string>{"He", "", ""}));
  EXPECT_EQ(s.held, (std::vector<size_t>{3, 4, 0}));
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.All(), "He");
}

TEST(TextStreamerTest, PrefixIsHeldThenReleased) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = OneTokenEach(*tok, {"hello", " wor", "ld", "?"});
  const Streamed s = Stream(*tok, {"world!"}, ids);
  EXPECT_EQ(s.deltas, (std::vector<std::string>{"hello", " ", "", "world?"}));
  EXPECT_EQ(s.held, (std::vector<size_t>{0, 3, 5, 0}));
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(s.finish, "");

  // Generation ending while text is held back: Finish releases it.
  const Streamed cut = Stream(*tok, {"world!"}, {ids[0], ids[1], ids[2]});
  EXPECT_EQ(cut.deltas, (std::vector<std::string>{"hello", " ", ""}));
  EXPECT_EQ(cut.finish, "world");
  EXPECT_FALSE(cut.stopped);
}

TEST(TextStreamerTest, EarliestOccurrenceWinsWhateverItsLengthOrOrder) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = OneTokenEach(*tok, {"Hello", ",", " world", "!"});
  // " world" completes both; "lo, world" (longer) starts before "wor".
  for (const auto& stop : {std::vector<std::string>{"lo, world", "wor"},
                           std::vector<std::string>{"wor", "lo, world"}}) {
    const Streamed s = Stream(*tok, stop, ids);
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.All(), "Hel");
  }
  // "o, w" (shorter) starts before "world".
  for (const auto& stop :
       {std::vector<std::string>{"world", "o, w"}, std::vector<std::string>{"o, w", "world"}}) {
    const Streamed s = Stream(*tok, stop, ids);
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.All(), "Hell");
  }
  // Both inside one token: "wo" before "rld".
  const Streamed s = Stream(*tok, {"rld", "wo"}, ids);
  EXPECT_EQ(s.deltas, (std::vector<std::string>{"Hello", ",", " "}));
  EXPECT_TRUE(s.stopped);
}

TEST(TextStreamerTest, StopStringAtTheVeryStart) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = OneTokenEach(*tok, {"Hello", ",", " world"});
  for (const std::string& stop : {"Hello", "He", "Hello,"}) {
    const Streamed s = Stream(*tok, {stop}, ids);
    EXPECT_TRUE(s.stopped) << stop;
    EXPECT_EQ(s.All(), "") << stop;
  }
}

TEST(TextStreamerTest, MultiByteStopStrings) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  // " café" "!" " \xE6" "\x97" "\xA5" "本" ...: "日" (E6 97 A5) comes in three tokens.
  const std::string text = " café! 日本語 é!";
  const std::vector<int32_t> ids = Encode(*tok, text);
  ASSERT_EQ(Decode(*tok, ids), text);

  // "é" ends " café" and may begin "é!": held (2 bytes) until "!" completes the stop.
  const Streamed cafe = Stream(*tok, {"é!"}, ids);
  EXPECT_EQ(cafe.deltas, (std::vector<std::string>{" caf", ""}));
  EXPECT_EQ(cafe.held[0], 2u);
  EXPECT_TRUE(cafe.stopped);

  const Streamed nihon = Stream(*tok, {"日本"}, ids);
  EXPECT_TRUE(nihon.stopped);
  EXPECT_EQ(nihon.All(), " café! ");

  // Held whole characters that turn out not to be a stop: "日本" released with "語".
  const Streamed never = Stream(*tok, {"日本!", "語 é?"}, ids);
  EXPECT_FALSE(never.stopped);
  EXPECT_EQ(never.All(), text);
  for (size_t held : never.held) EXPECT_LT(held, std::string("日本!").size());

  // A stop string whose last character shares its lead byte with the text's: "é" is C3 A9.
  const Streamed other = Stream(*tok, {"caf\xC3\xA8"}, ids);  // "cafè"
  EXPECT_FALSE(other.stopped);
  EXPECT_EQ(other.All(), text);
}

TEST(TextStreamerTest, FinishFlushesAPartialCharacter) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = Encode(*tok, " 日本");
  ASSERT_GE(ids.size(), 2u);
  const std::vector<int32_t> first = {ids[0]};  // " \xE6": the space and half a character
  ASSERT_EQ(Decode(*tok, first), absl::StrCat(" ", kReplacement));

  TextStreamer streamer(*tok, {"xyz"});
  auto delta = streamer.Feed(ids[0]);
  ASSERT_TRUE(delta.ok());
  EXPECT_EQ(delta->text, " ");
  EXPECT_EQ(streamer.held_back_bytes(), 0u);  // the decoder's partial byte is not counted
  EXPECT_EQ(streamer.Finish(), kReplacement);
  EXPECT_EQ(streamer.Finish(), "");
  EXPECT_EQ(streamer.Feed(ids[1]).status().code(), absl::StatusCode::kFailedPrecondition);

  // Only a stop string containing U+FFFD can end with that flushed character.
  const Streamed s = Stream(*tok, {kReplacement}, first);
  EXPECT_EQ(s.All(), " ");
  EXPECT_TRUE(s.stopped);
}

TEST(TextStreamerTest, SpecialTokens) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const int32_t eos = tok->eos_id();
  ASSERT_TRUE(tok->IsSpecial(eos));
  const std::string eos_text(tok->TokenBytes(eos));  // "<|im_end|>"
  std::vector<int32_t> ids = OneTokenEach(*tok, {"Hello", "<"});
  ids.push_back(eos);
  // Skipped: nothing to match, "<" released at the end.
  const Streamed skipped = Stream(*tok, {eos_text}, ids);
  EXPECT_EQ(skipped.deltas, (std::vector<std::string>{"Hello", "", ""}));
  EXPECT_EQ(skipped.finish, "<");
  EXPECT_FALSE(skipped.stopped);
  // Not skipped: the special token's text completes the stop string.
  const Streamed shown = Stream(*tok, {eos_text}, ids, /*skip_special=*/false);
  EXPECT_EQ(shown.All(), "Hello<");
  EXPECT_TRUE(shown.stopped);
}

TEST(TextStreamerTest, FeedAfterStopIsFailedPrecondition) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = OneTokenEach(*tok, {"Hello", " world", "!"});
  TextStreamer streamer(*tok, {"world"});
  ASSERT_TRUE(streamer.Feed(ids[0]).ok());
  auto delta = streamer.Feed(ids[1]);
  ASSERT_TRUE(delta.ok());
  EXPECT_EQ(delta->text, " ");
  EXPECT_TRUE(delta->stopped);
  EXPECT_TRUE(streamer.stopped());
  EXPECT_EQ(streamer.Feed(ids[2]).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(streamer.Finish(), "");
  EXPECT_EQ(streamer.held_back_bytes(), 0u);
}

TEST(TextStreamerTest, BadIdIsInvalidArgumentAndChangesNothing) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = OneTokenEach(*tok, {"hello", " wor", "ld", "!"});
  TextStreamer streamer(*tok, {"world!"});
  ASSERT_TRUE(streamer.Feed(ids[0]).ok());
  ASSERT_TRUE(streamer.Feed(ids[1]).ok());
  EXPECT_EQ(streamer.held_back_bytes(), 3u);
  EXPECT_EQ(streamer.Feed(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(streamer.Feed(tok->vocab_size()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(streamer.held_back_bytes(), 3u);
  EXPECT_FALSE(streamer.stopped());
  ASSERT_TRUE(streamer.Feed(ids[2]).ok());
  auto delta = streamer.Feed(ids[3]);
  ASSERT_TRUE(delta.ok());
  EXPECT_EQ(delta->text, "");
  EXPECT_TRUE(delta->stopped);
}

// A random string of whole characters of `text`: [first, first + count) code points.
std::string CodePointSubstr(const std::string& text, size_t first, size_t count) {
  std::vector<size_t> starts;  // byte offset of each code point, then text.size()
  for (size_t i = 0; i < text.size(); i += model::Utf8SequenceLength(text, i)) {
    starts.push_back(i);
  }
  starts.push_back(text.size());
  const size_t n = starts.size() - 1;
  first = std::min(first, n);
  const size_t last = std::min(n, first + count);
  return text.substr(starts[first], starts[last] - starts[first]);
}

// The invariant on random texts and stop strings, against a reference that decodes every
// prefix of the ids with Tokenizer::Decode: the stream stops at the first token after which
// some stop string occurs, cut before the earliest occurrence; otherwise it is all the text.
// After every Feed, the unsent text must be exactly the longest suffix of the text so far
// that is a proper prefix of some stop string.
TEST(TextStreamerTest, RandomTextsKeepTheInvariant) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << kModel << " is missing (scripts/fetch-model.sh)";
  const Tokenizer* tok = SmolTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> words = {
      "the",      " cat", " sat", "hello", " world", "!",     "?",    ",",        ".",
      " ",        "\n",   "é",    "café",  " naïve", "über",  "日本", "語",       "😀",
      "👍🏽", "ab",   "abc",  "a",     "b",      " stop", "STOP", "e\xCC\x81"};
  std::mt19937 rng(20240607);
  auto uniform = [&rng](size_t lo, size_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  int stopped_runs = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    for (size_t i = 0, n = uniform(1, 40); i < n; ++i) text += words[uniform(0, words.size() - 1)];
    const std::vector<int32_t> ids = Encode(*tok, text);
    const std::string decoded = Decode(*tok, ids);
    ASSERT_EQ(decoded, text);

    std::vector<std::string> stop;
    for (size_t i = 0, n = uniform(0, 3); i < n; ++i) {
      if (uniform(0, 2) != 0) {
        stop.push_back(CodePointSubstr(decoded, uniform(0, decoded.size()), uniform(1, 8)));
      } else {
        std::string s;
        for (size_t j = 0, m = uniform(1, 3); j < m; ++j) s += words[uniform(0, words.size() - 1)];
        stop.push_back(s);
      }
      if (stop.back().empty()) stop.back() = "xyz";
    }
    size_t max_stop = 0;
    for (const std::string& s : stop) max_stop = std::max(max_stop, s.size());
    SCOPED_TRACE(testing::Message() << "iteration " << iter << ", text \"" << text << "\"");

    // Reference.
    std::string expected = decoded;
    size_t expected_stop_token = ids.size();  // index of the token that completes a stop
    for (size_t k = 1; k <= ids.size() && expected_stop_token == ids.size(); ++k) {
      const std::string prefix = Decode(*tok, absl::MakeConstSpan(ids).first(k));
      size_t earliest = std::string::npos;
      for (const std::string& s : stop) earliest = std::min(earliest, prefix.find(s));
      if (earliest != std::string::npos) {
        expected = prefix.substr(0, earliest);
        expected_stop_token = k - 1;
      }
    }

    TextStreamer streamer(*tok, stop);
    model::IncrementalDecoder decoder(*tok, /*skip_special=*/true);
    std::string so_far;  // whole characters decoded so far
    std::string sent;
    for (size_t k = 0; k < ids.size(); ++k) {
      auto delta = streamer.Feed(ids[k]);
      ASSERT_TRUE(delta.ok()) << delta.status();
      ASSERT_TRUE(model::IsValidUtf8(delta->text));
      sent += delta->text;
      so_far += *decoder.Feed(ids[k]);
      if (delta->stopped) {
        EXPECT_EQ(k, expected_stop_token);
        break;
      }
      ASSERT_LT(k, expected_stop_token) << "missed a stop string";
      // Held back: exactly the longest suffix that is a proper prefix of a stop string.
      ASSERT_EQ(so_far.compare(0, sent.size(), sent), 0);
      const std::string held = so_far.substr(sent.size());
      EXPECT_EQ(streamer.held_back_bytes(), held.size());
      size_t longest = 0;
      for (const std::string& s : stop) {
        for (size_t n = 1; n < s.size() && n <= so_far.size(); ++n) {
          if (so_far.compare(so_far.size() - n, n, s, 0, n) == 0) longest = std::max(longest, n);
        }
      }
      EXPECT_EQ(held.size(), longest) << "held \"" << held << "\"";
      EXPECT_LT(held.size(), std::max<size_t>(max_stop, 1));
    }
    const std::string finish = streamer.Finish();
    EXPECT_TRUE(model::IsValidUtf8(finish));
    EXPECT_EQ(sent + finish, expected);
    EXPECT_EQ(streamer.stopped(), expected_stop_token < ids.size());
    stopped_runs += streamer.stopped() ? 1 : 0;
  }
  // The random stop strings must exercise both outcomes.
  EXPECT_GT(stopped_runs, 50);
  EXPECT_LT(stopped_runs, 280);
}

}  // namespace
}  // namespace tpserve::coordinator
