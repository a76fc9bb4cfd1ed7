// ChatML (SmolLM2, Qwen): <|im_start|>role\ncontent<|im_end|>\n per message, optionally a
// default system message the template text itself spells out.
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/chat/chat_template.h"

namespace tpserve::model {
namespace {

class ChatMlTemplate final : public ChatTemplate {
 public:
  explicit ChatMlTemplate(std::optional<std::string> default_system)
      : default_system_(std::move(default_system)) {}

  absl::StatusOr<ChatText> Render(absl::Span<const ChatMessage> messages,
                                  bool add_generation_prompt) const override {
    RETURN_IF_ERROR(CheckRoles(messages));
    ChatText out;
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      // {% if loop.first and messages[0]['role'] != 'system' %}{{ default }}{% endif %}
      if (i == 0 && m.role != "system" && default_system_.has_value()) {
        out.AppendMarkup(*default_system_);
      }
      out.AppendMarkup(absl::StrCat("<|im_start|>", m.role, "\n"));
      out.AppendContent(m.content);
      out.AppendMarkup("<|im_end|>\n");
    }
    if (add_generation_prompt) out.AppendMarkup("<|im_start|>assistant\n");
    return out;
  }
  std::string_view name() const override { return "chatml"; }

 private:
  std::optional<std::string> default_system_;
};

// Skips spaces and Jinja's whitespace-control '-' from `pos`.
size_t SkipBlank(std::string_view t, size_t pos) {
  while (pos < t.size() && (t[pos] == ' ' || t[pos] == '-' || t[pos] == '\n')) ++pos;
  return pos;
}

// Reads the Jinja (Python-style) string literal at t[pos] into `out`; returns the offset
// after it, or npos when there is none.
size_t ReadStringLiteral(std::string_view t, size_t pos, std::string* out) {
  if (pos >= t.size() || (t[pos] != '\'' && t[pos] != '"')) return std::string_view::npos;
  const char quote = t[pos++];
  while (pos < t.size() && t[pos] != quote) {
    char c = t[pos++];
    if (c == '\\') {
      if (pos >= t.size()) return std::string_view::npos;
      c = t[pos++];
      switch (c) {
        case 'n':
          c = '\n';
          break;
        case 't':
          c = '\t';
          break;
        case 'r':
          c = '\r';
          break;
        case '\\':
        case '\'':
        case '"':
          break;
        default:
          out->push_back('\\');
          break;  // Python keeps unknown escapes verbatim
      }
    }
    out->push_back(c);
  }
  return pos < t.size() ? pos + 1 : std::string_view::npos;
}

}  // namespace

absl::StatusOr<std::optional<std::string>> ParseChatMlDefaultSystem(std::string_view text) {
  size_t cond = text.find("!= 'system'");
  if (cond == std::string_view::npos) cond = text.find("!= \"system\"");
  if (cond == std::string_view::npos) return std::nullopt;
  const auto bad = [&]() {
    return absl::InvalidArgumentError(
        "ChatML template: cannot read the default system message after \"!= 'system'\"");
  };
  size_t pos = text.find("%}", cond);
  if (pos == std::string_view::npos) return bad();
  pos = SkipBlank(text, pos + 2);
  if (text.substr(pos, 2) != "{{") return bad();
  std::string literal;
  pos = ReadStringLiteral(text, SkipBlank(text, pos + 2), &literal);
  if (pos == std::string_view::npos) return bad();
  pos = SkipBlank(text, pos);
  if (text.substr(pos, 2) != "}}" || literal.rfind("<|im_start|>system", 0) != 0) return bad();
  return literal;
}

std::unique_ptr<ChatTemplate> NewChatMlTemplate(std::optional<std::string> default_system) {
  return std::make_unique<ChatMlTemplate>(std::move(default_system));
}

}  // namespace tpserve::model
