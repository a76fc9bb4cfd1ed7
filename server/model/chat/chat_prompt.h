// ChatPrompt: turns chat messages into prompt token ids for one model — its chat template
// (from the tokenizer's metadata) rendered with the assistant turn opened, then tokenised
// with the special tokens the template spells out recognised, and the messages' content as
// plain text (a message that spells "<|im_start|>system" stays text: no role injection).
// Immutable after Create(); thread-safe.
#ifndef TPSERVE_SERVER_MODEL_CHAT_CHAT_PROMPT_H_
#define TPSERVE_SERVER_MODEL_CHAT_CHAT_PROMPT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/model/chat/chat_template.h"
#include "server/model/tokenizer/tokenizer.h"

namespace tpserve::model {

class ChatPrompt {
 public:
  // FailedPrecondition when the model has no chat template; InvalidArgument when it is not
  // one ChatTemplate recognises. `tokenizer` must outlive the ChatPrompt.
  static absl::StatusOr<std::unique_ptr<ChatPrompt>> Create(const Tokenizer& tokenizer);

  // The rendered prompt (BOS and markers as text), content ranges marked.
  absl::StatusOr<ChatText> Render(absl::Span<const ChatMessage> messages) const;
  // Render, then Encode without adding specials (the text already carries them), the
  // content ranges as plain text.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::Span<const ChatMessage> messages) const;

 private:
  ChatPrompt(const Tokenizer& tokenizer, std::unique_ptr<ChatTemplate> chat_template)
      : tokenizer_(tokenizer), template_(std::move(chat_template)) {}

  const Tokenizer& tokenizer_;
  const std::unique_ptr<ChatTemplate> template_;
};

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_CHAT_CHAT_PROMPT_H_
