// ChatTemplate: renders a list of chat messages into a prompt exactly as the model's Jinja
// chat template would (with add_generation_prompt), keeping apart what is message content. One
// implementation per template family, each in its own file (chat_template_<name>.cc);
// ChatTemplate::FromText recognises which family a template text is by its distinctive markers.
// Immutable; thread-safe.
#ifndef TPSERVE_SERVER_MODEL_CHAT_CHAT_TEMPLATE_H_
#define TPSERVE_SERVER_MODEL_CHAT_CHAT_TEMPLATE_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/model/chat/chat_text.h"

namespace tpserve::model {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;

  // Recognises `template_text` (ChatML, Llama 2, Llama 3, Mistral). `bos_token` and
  // `eos_token` are the token strings the templates that emit them insert. An unrecognised
  // template is InvalidArgument.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromText(std::string_view template_text,
                                                                std::string bos_token,
                                                                std::string eos_token);

  // The prompt for `messages`, each message's content marked as such (see ChatText). A role
  // other than system/user/assistant is InvalidArgument naming it; so is anything the
  // template itself rejects (raise_exception).
  virtual absl::StatusOr<ChatText> Render(absl::Span<const ChatMessage> messages,
                                          bool add_generation_prompt) const = 0;
  // "chatml", "llama2", "llama3" or "mistral".
  virtual std::string_view name() const = 0;
};

// InvalidArgument naming the first role that is not system, user or assistant.
absl::Status CheckRoles(absl::Span<const ChatMessage> messages);

// The families, one file each. `default_system`: the text a ChatML template inserts before
// the first message when that is not a system message (std::nullopt: none).
std::unique_ptr<ChatTemplate> NewChatMlTemplate(std::optional<std::string> default_system);
std::unique_ptr<ChatTemplate> NewLlama2Template(std::string bos_token, std::string eos_token);
std::unique_ptr<ChatTemplate> NewLlama3Template(std::string bos_token);
std::unique_ptr<ChatTemplate> NewMistralTemplate(std::string bos_token, std::string eos_token);
std::unique_ptr<ChatTemplate> NewGemmaTemplate(std::string bos_token);

// For ChatML: the string literal the template emits when messages[0] is not a system
// message (e.g. "<|im_start|>system\n...<|im_end|>\n"), std::nullopt when it has no such
// branch, InvalidArgument when the branch exists but its literal cannot be read.
absl::StatusOr<std::optional<std::string>> ParseChatMlDefaultSystem(std::string_view text);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_CHAT_CHAT_TEMPLATE_H_
