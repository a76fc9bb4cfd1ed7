// Llama 2 Chat: a leading system message is folded into the first user turn inside
// <<SYS>>...<</SYS>>; user turns are bos [INST] ... [/INST], assistant turns " ... eos".
// Users and assistants must alternate, starting with a user.
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/chat/chat_template.h"

namespace tpserve::model {
namespace {

class Llama2Template final : public ChatTemplate {
 public:
  Llama2Template(std::string bos, std::string eos) : bos_(std::move(bos)), eos_(std::move(eos)) {}

  absl::StatusOr<ChatText> Render(absl::Span<const ChatMessage> messages,
                                  bool add_generation_prompt) const override {
    RETURN_IF_ERROR(CheckRoles(messages));
    if (messages.empty()) {  // the template reads messages[0]['role'], undefined then
      return absl::InvalidArgumentError("the Llama 2 chat template needs at least one message");
    }
    absl::Span<const ChatMessage> loop = messages;
    std::optional<std::string> system;
    if (!messages.empty() && messages[0].role == "system") {
      system = messages[0].content;
      loop = messages.subspan(1);
    }
    ChatText out;
    for (size_t i = 0; i < loop.size(); ++i) {
      const ChatMessage& m = loop[i];
      if ((m.role == "user") != (i % 2 == 0)) {
        return absl::InvalidArgumentError(
            "Conversation roles must alternate user/assistant/user/assistant/...");
      }
      ChatText content;
      if (i == 0 && system.has_value()) {
        content.AppendMarkup("<<SYS>>\n");
        content.AppendContent(*system);
        content.AppendMarkup("\n<</SYS>>\n\n");
      }
      content.AppendContent(m.content);
      if (m.role == "user") {
        out.AppendMarkup(absl::StrCat(bos_, "[INST] "));
        out.Append(content.Stripped());
        out.AppendMarkup(" [/INST]");
      } else if (m.role == "assistant") {
        out.AppendMarkup(" ");
        out.Append(content.Stripped());
        out.AppendMarkup(absl::StrCat(" ", eos_));
      }
      // A later "system" message at an odd position renders nothing, as in the template.
    }
    return out;  // the template has no generation prompt
  }
  std::string_view name() const override { return "llama2"; }

 private:
  std::string bos_, eos_;
};

}  // namespace

std::unique_ptr<ChatTemplate> NewLlama2Template(std::string bos_token, std::string eos_token) {
  return std::make_unique<Llama2Template>(std::move(bos_token), std::move(eos_token));
}

}  // namespace tpserve::model
