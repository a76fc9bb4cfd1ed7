// Gemma (2 and 3) instruction format: bos, then <start_of_turn>ROLE\n + trimmed content +
// <end_of_turn>\n per message, ROLE "user" or "model" (for assistant), strictly alternating from
// a user turn; a leading system message has no turn of its own: its content and a blank line
// open the first user turn. The generation prompt is <start_of_turn>model\n.
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/chat/chat_template.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::model {
namespace {

class GemmaTemplate final : public ChatTemplate {
 public:
  explicit GemmaTemplate(std::string bos) : bos_(std::move(bos)) {}

  absl::StatusOr<ChatText> Render(absl::Span<const ChatMessage> messages,
                                  bool add_generation_prompt) const override {
    RETURN_IF_ERROR(CheckRoles(messages));
    ChatText out;
    out.AppendMarkup(bos_);
    const bool system = !messages.empty() && messages.front().role == "system";
    const absl::Span<const ChatMessage> turns = messages.subspan(system ? 1 : 0);
    for (size_t i = 0; i < turns.size(); ++i) {
      const ChatMessage& m = turns[i];
      if (m.role == "system" || (m.role == "user") != (i % 2 == 0)) {
        return absl::InvalidArgumentError(
            "Conversation roles must alternate user/assistant/user/assistant/...");
      }
      out.AppendMarkup(
          absl::StrCat("<start_of_turn>", m.role == "assistant" ? "model" : "user", "\n"));
      if (i == 0 && system) {
        out.AppendContent(messages.front().content);  // the template does not trim it
        out.AppendMarkup("\n\n");
      }
      out.AppendContent(PythonStrip(m.content));  // | trim
      out.AppendMarkup("<end_of_turn>\n");
    }
    if (add_generation_prompt) out.AppendMarkup("<start_of_turn>model\n");
    return out;
  }
  std::string_view name() const override { return "gemma"; }

 private:
  std::string bos_;
};

}  // namespace

std::unique_ptr<ChatTemplate> NewGemmaTemplate(std::string bos_token) {
  return std::make_unique<GemmaTemplate>(std::move(bos_token));
}

}  // namespace tpserve::model
