// Mistral Instruct (v0.1): bos, then [INST] user [/INST] and assistant + eos, strictly
// alternating from a user turn; the template rejects system messages.
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/chat/chat_template.h"

namespace tpserve::model {
namespace {

class MistralTemplate final : public ChatTemplate {
 public:
  MistralTemplate(std::string bos, std::string eos) : bos_(std::move(bos)), eos_(std::move(eos)) {}

  absl::StatusOr<ChatText> Render(absl::Span<const ChatMessage> messages,
                                  bool add_generation_prompt) const override {
    RETURN_IF_ERROR(CheckRoles(messages));
    ChatText out;
    out.AppendMarkup(bos_);
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      if ((m.role == "user") != (i % 2 == 0)) {
        return absl::InvalidArgumentError(
            "Conversation roles must alternate user/assistant/user/assistant/...");
      }
      if (m.role == "user") {
        out.AppendMarkup("[INST] ");
        out.AppendContent(m.content);
        out.AppendMarkup(" [/INST]");
      } else if (m.role == "assistant") {
        out.AppendContent(m.content);
        out.AppendMarkup(eos_);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("Only user and assistant roles are supported! (got '", m.role, "')"));
      }
    }
    return out;  // the template has no generation prompt
  }
  std::string_view name() const override { return "mistral"; }

 private:
  std::string bos_, eos_;
};

}  // namespace

std::unique_ptr<ChatTemplate> NewMistralTemplate(std::string bos_token, std::string eos_token) {
  return std::make_unique<MistralTemplate>(std::move(bos_token), std::move(eos_token));
}

}  // namespace tpserve::model
