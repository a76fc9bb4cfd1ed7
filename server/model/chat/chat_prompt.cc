#include "server/model/chat/chat_prompt.h"

#include <utility>

#include "server/common/status_macros.h"

namespace tpserve::model {

absl::StatusOr<std::unique_ptr<ChatPrompt>> ChatPrompt::Create(const Tokenizer& tokenizer) {
  if (tokenizer.chat_template().empty()) {
    return absl::FailedPreconditionError("the model has no chat template");
  }
  auto piece = [&](int32_t id) {
    return tokenizer.IsValidId(id) ? std::string(tokenizer.TokenPiece(id)) : std::string();
  };
  ASSIGN_OR_RETURN(std::unique_ptr<ChatTemplate> chat_template,
                   ChatTemplate::FromText(tokenizer.chat_template(), piece(tokenizer.bos_id()),
                                          piece(tokenizer.eos_id())));
  return std::unique_ptr<ChatPrompt>(new ChatPrompt(tokenizer, std::move(chat_template)));
}

absl::StatusOr<ChatText> ChatPrompt::Render(absl::Span<const ChatMessage> messages) const {
  return template_->Render(messages, /*add_generation_prompt=*/true);
}

absl::StatusOr<std::vector<int32_t>> ChatPrompt::Encode(
    absl::Span<const ChatMessage> messages) const {
  ASSIGN_OR_RETURN(ChatText text, Render(messages));
  return tokenizer_.Encode(text.text(), /*add_special=*/false, text.content());
}

}  // namespace tpserve::model
