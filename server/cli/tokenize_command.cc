#include "server/cli/tokenize_command.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/chat/chat_template.h"
#include "server/model/tokenizer/tokenizer.h"

namespace tpserve::cli {
namespace {

using json = nlohmann::json;
using model::ChatMessage;
using model::ChatTemplate;
using model::ChatText;
using model::Tokenizer;

std::string Dump(const json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
}

absl::StatusOr<std::vector<ChatMessage>> ParseMessages(const json& line) {
  if (!line.is_array()) return absl::InvalidArgumentError("expected a JSON array of messages");
  std::vector<ChatMessage> messages;
  for (const json& m : line) {
    auto role = m.is_object() ? m.find("role") : m.end();
    auto content = m.is_object() ? m.find("content") : m.end();
    if (!m.is_object() || role == m.end() || !role->is_string() || content == m.end() ||
        !content->is_string()) {
      return absl::InvalidArgumentError("a message is not {\"role\": str, \"content\": str}");
    }
    messages.push_back({role->get<std::string>(), content->get<std::string>()});
  }
  return messages;
}

absl::StatusOr<std::vector<int32_t>> ParseIds(const json& line) {
  if (!line.is_array()) return absl::InvalidArgumentError("expected a JSON array of token ids");
  std::vector<int32_t> ids;
  for (const json& v : line) {
    if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError("a token id is not a 32-bit integer");
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

// The output for one input line.
absl::StatusOr<json> HandleLine(const TokenizeOptions& options, const Tokenizer& tokenizer,
                                const ChatTemplate* chat, const std::string& text) {
  const json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (line.is_discarded()) return absl::InvalidArgumentError("the line is not JSON");
  if (options.decode) {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIds(line));
    ASSIGN_OR_RETURN(std::string decoded, tokenizer.Decode(ids, options.skip_special));
    return json(decoded);
  }
  ChatText prompt;  // raw text: all markup (special-token text recognised)
  if (chat != nullptr) {
    ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, ParseMessages(line));
    ASSIGN_OR_RETURN(prompt, chat->Render(messages, /*add_generation_prompt=*/true));
    if (options.render) return json(prompt.text());
  } else {
    if (!line.is_string()) return absl::InvalidArgumentError("expected a JSON string of text");
    prompt.AppendMarkup(line.get<std::string>());
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                   tokenizer.Encode(prompt.text(), options.add_special, prompt.content()));
  return json(ids);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

absl::Status RunTokenize(const TokenizeOptions& options, std::istream& in, std::ostream& out) {
  if (options.decode && options.chat) {
    return absl::InvalidArgumentError("--decode and --chat exclude each other");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::Load(options.model_path));
  std::unique_ptr<ChatTemplate> chat;
  if (options.chat) {
    std::string text = tokenizer->chat_template();
    if (!options.chat_template_path.empty()) {
      ASSIGN_OR_RETURN(text, ReadFile(options.chat_template_path));
    }
    if (text.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(options.model_path, " has no chat template"));
    }
    auto piece = [&](int32_t id) {
      return tokenizer->IsValidId(id) ? std::string(tokenizer->TokenPiece(id)) : std::string();
    };
    ASSIGN_OR_RETURN(
        chat, ChatTemplate::FromText(text, piece(tokenizer->bos_id()), piece(tokenizer->eos_id())));
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    absl::StatusOr<json> result = HandleLine(options, *tokenizer, chat.get(), line);
    if (result.ok()) {
      out << Dump(*result) << '\n';
    } else {
      out << Dump(json{{"error", std::string{result.status().message()}}}) << '\n';
    }
  }
  out.flush();
  return absl::OkStatus();
}

}  // namespace tpserve::cli
