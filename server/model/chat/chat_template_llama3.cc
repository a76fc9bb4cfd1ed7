// Llama 3 Instruct: bos, then <|start_header_id|>role<|end_header_id|>\n\n + trimmed
// content + <|eot_id|> per message.
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/chat/chat_template.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::model {
namespace {

class Llama3Template final : public ChatTemplate {
 public:
  explicit Llama3Template(std::string bos) : bos_(std::move(bos)) {}

  absl::StatusOr<ChatText> Render(absl::Span<const ChatMessage> messages,
                                  bool add_generation_prompt) const override {
    RETURN_IF_ERROR(CheckRoles(messages));
    ChatText out;
    for (size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) out.AppendMarkup(bos_);
      out.AppendMarkup(
          absl::StrCat("<|start_header_id|>", messages[i].role, "<|end_header_id|>\n\n"));
      out.AppendContent(PythonStrip(messages[i].content));  // | trim
      out.AppendMarkup("<|eot_id|>");
    }
    if (add_generation_prompt) {
      out.AppendMarkup("<|start_header_id|>assistant<|end_header_id|>\n\n");
    }
    return out;
  }
  std::string_view name() const override { return "llama3"; }

 private:
  std::string bos_;
};

}  // namespace

std::unique_ptr<ChatTemplate> NewLlama3Template(std::string bos_token) {
  return std::make_unique<Llama3Template>(std::move(bos_token));
}

}  // namespace tpserve::model
