// AddedTokenMatcher: finds added (special and user-defined) tokens inside raw text before BPE,
// leftmost-longest as Hugging Face's added vocabulary does, so "<|im_start|>" in a prompt is
// one token. Immutable after Create; thread-safe.
#ifndef TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_ADDED_TOKENS_H_
#define TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tpserve::model {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;  // skipped by Decode(skip_special)
  bool lstrip = false;   // the match swallows whitespace on its left
  bool rstrip = false;   // ... and on its right
};

// Bytes [begin, end) of a text.
struct ByteRange {
  size_t begin = 0;
  size_t end = 0;
};

// A stretch of text between matches, or one matched token.
struct TextSegment {
  std::string_view text;  // empty for a token
  int32_t token_id = -1;  // >= 0 for a token
};

class AddedTokenMatcher {
 public:
  // InvalidArgument on an empty content.
  static absl::StatusOr<AddedTokenMatcher> Create(std::vector<AddedToken> tokens);
  AddedTokenMatcher() = default;

  // Splits `text` (valid UTF-8) into segments in order; empty text stretches are omitted.
  // No match overlaps a range of `literal` (sorted, disjoint, within `text`): text there is
  // plain text even where it spells a token (chat message content).
  std::vector<TextSegment> Split(std::string_view text,
                                 absl::Span<const ByteRange> literal = {}) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  // First byte -> indices into tokens_, longest content first.
  std::array<std::vector<int>, 256> by_first_byte_;
};

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_TOKENIZER_TOKENIZER_ADDED_TOKENS_H_
