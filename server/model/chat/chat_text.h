// ChatText: a chat prompt as a chat template renders it, and which bytes of it are message
// content. The template's own text (its markers, e.g. "<|im_start|>") is tokenised with
// special tokens recognised; the content ranges are tokenised as plain text, so that a
// message cannot spell a control token (role injection). A value type; not thread-safe to
// mutate, safe to share once built.
#ifndef TPSERVE_SERVER_MODEL_CHAT_CHAT_TEXT_H_
#define TPSERVE_SERVER_MODEL_CHAT_CHAT_TEXT_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "server/model/tokenizer/tokenizer_added_tokens.h"

namespace tpserve::model {

class ChatText {
 public:
  ChatText() = default;

  // Template text: special-token text in it becomes special tokens.
  void AppendMarkup(std::string_view markup);
  // Message content: tokenised as plain text whatever it spells.
  void AppendContent(std::string_view content);
  void Append(const ChatText& other);  // `other` must not be *this
  // Python's str.strip() of the whole text (as Jinja's `| trim`), content ranges clipped to
  // what is left.
  ChatText Stripped() const;

  const std::string& text() const { return text_; }
  // Byte ranges of text() that are content: sorted, disjoint, adjacent ranges merged.
  absl::Span<const ByteRange> content() const { return content_; }

 private:
  std::string text_;
  std::vector<ByteRange> content_;
};

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_CHAT_CHAT_TEXT_H_
