// ChatTemplate::FromText (the recogniser) and the checks shared by every family.
#include "server/model/chat/chat_template.h"

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"

namespace tpserve::model {
namespace {

bool Contains(std::string_view text, std::string_view marker) {
  return text.find(marker) != std::string_view::npos;
}

}  // namespace

absl::Status CheckRoles(absl::Span<const ChatMessage> messages) {
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported chat role '", m.role, "' (system, user or assistant)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromText(std::string_view template_text,
                                                                     std::string bos_token,
                                                                     std::string eos_token) {
  const std::string_view t = template_text;
  if (Contains(t, "<|im_start|>")) {
    ASSIGN_OR_RETURN(std::optional<std::string> default_system, ParseChatMlDefaultSystem(t));
    return NewChatMlTemplate(std::move(default_system));
  }
  if (Contains(t, "<|start_header_id|>") && Contains(t, "<|eot_id|>")) {
    return NewLlama3Template(std::move(bos_token));
  }
  if (Contains(t, "[INST]") && Contains(t, "<<SYS>>")) {
    return NewLlama2Template(std::move(bos_token), std::move(eos_token));
  }
  if (Contains(t, "<start_of_turn>") && Contains(t, "<end_of_turn>")) {
    return NewGemmaTemplate(std::move(bos_token));
  }
  if (Contains(t, "[INST]") && Contains(t, "[/INST]")) {
    return NewMistralTemplate(std::move(bos_token), std::move(eos_token));
  }
  std::string head(t.substr(0, 60));
  return absl::InvalidArgumentError(absl::StrCat(
      "unrecognised chat template (not ChatML, Llama 2, Llama 3, Mistral or Gemma): \"", head,
      t.size() > head.size() ? "...\"" : "\""));
}

}  // namespace tpserve::model
