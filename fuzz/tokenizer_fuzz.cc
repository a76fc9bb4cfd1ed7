// libFuzzer target for the tokenizer: arbitrary bytes through Encode (invalid UTF-8 must be
// an InvalidArgument Status), Decode and IncrementalDecoder (whose stream must equal Decode
// and never emit a partial character), and a ChatML render.
// The tokenizer is the model at $TPSERVE_FUZZ_MODEL (e.g. the SmolLM2 GGUF); unset, a small
// built-in byte-level vocabulary.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "server/model/chat/chat_template.h"
#include "server/model/tokenizer/incremental_decoder.h"
#include "server/model/tokenizer/tokenizer.h"
#include "server/model/tokenizer/utf8.h"

namespace {

using tpserve::model::Tokenizer;

// 256 byte characters (GPT-2 bytes_to_unicode order: byte b is id b), a few merges, and
// added tokens "<|im_start|>" (special) and "<|im_end|>" (special).
std::string BuiltInJson() {
  std::string vocab;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : next++;
    std::string s;
    if (cp == '"' || cp == '\\') {
      s = std::string("\\") + static_cast<char>(cp);
    } else if (cp < 0x80) {
      s = std::string(1, static_cast<char>(cp));
    } else {
      s = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    vocab += "\"" + s + "\": " + std::to_string(b) + ", ";
  }
  vocab += R"("Ġt": 256, "he": 257, "Ġthe": 258, "in": 259, "<|im_start|>": 260,
              "<|im_end|>": 261)";
  return R"({"model": {"type": "BPE", "vocab": {)" + vocab +
         R"(}, "merges": ["Ġ t", "h e", "Ġt he", "i n"]},
      "added_tokens": [{"id": 260, "content": "<|im_start|>", "special": true},
                       {"id": 261, "content": "<|im_end|>", "special": true}],
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": true},
        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]},
      "decoder": {"type": "ByteLevel"}})";
}

const Tokenizer& TheTokenizer() {
  static const Tokenizer* tokenizer = [] {
    const char* path = std::getenv("TPSERVE_FUZZ_MODEL");
    auto tok = path != nullptr && *path != '\0' ? Tokenizer::Load(path)
                                                : Tokenizer::FromJson(BuiltInJson());
    if (!tok.ok()) {
      fprintf(stderr, "tokenizer_fuzz: %s\n", std::string(tok.status().message()).c_str());
      abort();
    }
    return tok->release();
  }();
  return *tokenizer;
}

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "tokenizer_fuzz: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = TheTokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto ids = tok.Encode(text, /*add_special=*/true);
  const bool valid = tpserve::model::IsValidUtf8(text);
  Check(ids.ok() == valid, "Encode accepts exactly valid UTF-8");
  if (ids.ok()) {
    auto decoded = tok.Decode(*ids, /*skip_special=*/false);
    Check(decoded.ok(), "Decode of Encode output");
    tpserve::model::IncrementalDecoder stream(tok, /*skip_special=*/false);
    std::string streamed;
    for (int32_t id : *ids) {
      auto chunk = stream.Feed(id);
      Check(chunk.ok() && tpserve::model::IsValidUtf8(*chunk), "Feed emits whole characters");
      streamed += *chunk;
    }
    streamed += stream.Flush();
    Check(streamed == *decoded, "streamed text equals Decode");
    auto chat = tpserve::model::NewChatMlTemplate(std::nullopt);
    auto prompt = chat->Render({{"user", text}}, true);
    Check(prompt.ok() && tok.Encode(prompt->text(), false, prompt->content()).ok(),
          "ChatML render of valid text");
  }
  // The input read as token ids (any values, in or out of range): Decode is lossy or an error.
  std::vector<int32_t> raw(size / 4);
  for (size_t i = 0; i < raw.size(); ++i) {
    raw[i] = static_cast<int32_t>(data[4 * i] | (data[4 * i + 1] << 8) | (data[4 * i + 2] << 16)) %
             (tok.vocab_size() + 8);
  }
  auto text_of_raw = tok.Decode(raw, /*skip_special=*/true);
  if (text_of_raw.ok()) Check(tpserve::model::IsValidUtf8(*text_of_raw), "Decode is UTF-8");
  tpserve::model::IncrementalDecoder stream(tok, /*skip_special=*/true);
  std::string streamed;
  bool all_ok = true;
  for (int32_t id : raw) {
    auto chunk = stream.Feed(id);
    all_ok = all_ok && chunk.ok();
    if (chunk.ok()) streamed += *chunk;
  }
  streamed += stream.Flush();
  Check(all_ok == text_of_raw.ok(), "Feed and Decode agree on bad ids");
  if (all_ok) Check(streamed == *text_of_raw, "streamed raw ids equal Decode");
  return 0;
}
