#include "server/http/openai_response.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tpserve::http {
namespace {

using nlohmann::json;
using tpserve::v1::GenerateResponse;

bool IsChat(const OpenAiRequest& request) { return request.endpoint == Endpoint::kChatCompletions; }

json FinishReason(tpserve::v1::FinishReason reason) {
  switch (reason) {
    case tpserve::v1::FINISH_REASON_LENGTH:
      return "length";
    case tpserve::v1::FINISH_REASON_STOP:
    case tpserve::v1::FINISH_REASON_EOS:
      return "stop";
    case tpserve::v1::FINISH_REASON_CANCELLED:
      return "abort";
    default:
      return nullptr;
  }
}

// A token's raw bytes as OpenAI's list of integers.
json Bytes(const tpserve::v1::TokenLogprob& token) {
  json bytes = json::array();
  for (unsigned char c : token.bytes()) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// Characters (Unicode code points, as Python's len counts them) of valid UTF-8 `text`.
int64_t Characters(absl::string_view text) {
  return std::count_if(text.begin(), text.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; });
}

// Chat's logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
json ChatLogprobs(const OpenAiRequest& request, const GenerateResponse& message) {
  json content = json::array();
  for (const tpserve::v1::TokenLogprobs& lp : message.logprobs()) {
    json top = json::array();
    for (int i = 0; i < lp.top_size() && i < static_cast<int>(request.top_logprobs); ++i) {
      top.push_back({{"token", lp.top(i).text()},
                     {"logprob", lp.top(i).logprob()},
                     {"bytes", Bytes(lp.top(i))}});
    }
    content.push_back({{"token", lp.chosen().text()},
                       {"logprob", lp.chosen().logprob()},
                       {"bytes", Bytes(lp.chosen())},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

// Completions' logprobs: parallel lists, the alternatives as {token: logprob} maps, and each
// token's text_offset: the characters of the choice's token texts before it, from `*offset`,
// which it advances past this message's tokens.
json CompletionLogprobs(const OpenAiRequest& request, const GenerateResponse& message,
                        int64_t* offset) {
  json tokens = json::array(), logprobs = json::array(), tops = json::array();
  json offsets = json::array();
  for (const tpserve::v1::TokenLogprobs& lp : message.logprobs()) {
    offsets.push_back(*offset);
    *offset += Characters(lp.chosen().text());
    tokens.push_back(lp.chosen().text());
    logprobs.push_back(lp.chosen().logprob());
    json top = json::object();
    for (int i = 0; i < lp.top_size() && i < static_cast<int>(request.top_logprobs); ++i) {
      top[lp.top(i).text()] = lp.top(i).logprob();
    }
    tops.push_back(std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

// `*offset`: where the choice's completions text_offset goes on from.
json Logprobs(const OpenAiRequest& request, const GenerateResponse& message, int64_t* offset) {
  if (!request.logprobs) return nullptr;
  return IsChat(request) ? ChatLogprobs(request, message)
                         : CompletionLogprobs(request, message, offset);
}

// OpenAI's message.tool_calls.
json ToolCallsJson(const std::vector<ToolCall>& calls) {
  json list = json::array();
  for (const ToolCall& c : calls) {
    list.push_back({{"id", c.id},
                    {"type", "function"},
                    {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return list;
}

json UsageJson(const tpserve::v1::Usage& usage) {
  json out = {{"prompt_tokens", usage.prompt_tokens()},
              {"completion_tokens", usage.completion_tokens()},
              {"total_tokens", usage.prompt_tokens() + usage.completion_tokens()}};
  if (usage.speculative_proposed_tokens() > 0) {
    // Speculative decoding's counts, in the fields OpenAI gives predicted outputs.
    out["completion_tokens_details"] = {
        {"accepted_prediction_tokens", usage.speculative_accepted_tokens()},
        {"rejected_prediction_tokens",
         usage.speculative_proposed_tokens() - usage.speculative_accepted_tokens()}};
  }
  return out;
}

}  // namespace

void AddChoiceUsage(const tpserve::v1::Usage& choice, tpserve::v1::Usage* total) {
  total->set_prompt_tokens(choice.prompt_tokens());
  total->set_completion_tokens(total->completion_tokens() + choice.completion_tokens());
  total->set_speculative_proposed_tokens(total->speculative_proposed_tokens() +
                                         choice.speculative_proposed_tokens());
  total->set_speculative_accepted_tokens(total->speculative_accepted_tokens() +
                                         choice.speculative_accepted_tokens());
}

namespace {

json Envelope(const ResponseHeader& header, const char* object, json choices) {
  return {{"id", header.id},
          {"object", object},
          {"created", header.created},
          {"model", header.model},
          {"choices", std::move(choices)}};
}

// The field an error message names: its leading "field: …" or "field must …".
json Param(absl::string_view message) {
  const auto is_field_char = [](char c) {
    return absl::ascii_isalnum(c) || c == '_' || c == '-' || c == '.' || c == '[' || c == ']';
  };
  size_t end = 0;
  while (end < message.size() && is_field_char(message[end])) ++end;
  if (end == 0) return nullptr;
  const absl::string_view rest = message.substr(end);
  if (!absl::StartsWith(rest, ": ") && !absl::StartsWith(rest, " must ")) return nullptr;
  return static_cast<std::string>(message.substr(0, end));
}

}  // namespace

std::string ResponseId(Endpoint endpoint, absl::string_view request_id) {
  return absl::StrCat(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-", request_id);
}

void Accumulate(const GenerateResponse& message, GenerateResponse* total) {
  total->mutable_text()->append(message.text());
  total->mutable_token_ids()->MergeFrom(message.token_ids());
  total->mutable_logprobs()->MergeFrom(message.logprobs());
  if (message.finish_reason() != tpserve::v1::FINISH_REASON_UNSPECIFIED) {
    total->set_finish_reason(message.finish_reason());
  }
  if (message.has_usage()) *total->mutable_usage() = message.usage();
  if (total->request_id().empty()) total->set_request_id(message.request_id());
}

json WholeResponse(const OpenAiRequest& request, const ResponseHeader& header,
                   const std::vector<GenerateResponse>& choices) {
  json out = json::array();
  tpserve::v1::Usage usage;
  for (size_t i = 0; i < choices.size(); ++i) {
    const GenerateResponse& c = choices[i];
    int64_t offset = 0;
    json choice = {{"index", i},
                   {"logprobs", Logprobs(request, c, &offset)},
                   {"finish_reason", FinishReason(c.finish_reason())}};
    if (IsChat(request)) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text()}};
      if (request.tools.calls_allowed()) {
        if (std::optional<std::vector<ToolCall>> calls =
                ParseToolCalls(c.text(), absl::StrCat(c.request_id(), "_", i));
            calls.has_value()) {
          choice["message"] = {
              {"role", "assistant"}, {"content", nullptr}, {"tool_calls", ToolCallsJson(*calls)}};
          if (!choice["finish_reason"].is_null() && choice["finish_reason"] != "length") {
            choice["finish_reason"] = "tool_calls";
          }
        }
      }
    } else {
      choice["text"] = c.text();
    }
    out.push_back(std::move(choice));
    AddChoiceUsage(c.usage(), &usage);
  }
  json whole =
      Envelope(header, IsChat(request) ? "chat.completion" : "text_completion", std::move(out));
  whole["usage"] = UsageJson(usage);
  return whole;
}

json StreamChunk(const OpenAiRequest& request, const ResponseHeader& header, uint32_t index,
                 const GenerateResponse& message, ChunkPosition* position) {
  const bool first = position->first;
  position->first = false;
  json choice = {{"index", index},
                 {"logprobs", Logprobs(request, message, &position->text_offset)},
                 {"finish_reason", FinishReason(message.finish_reason())}};
  if (IsChat(request) && request.tools.calls_allowed() && !position->text) {
    // While the output may still be tool calls it is held back; it goes out as calls (or,
    // once it cannot be, as text) in one delta.
    position->held += message.text();
    const bool last = message.finish_reason() != tpserve::v1::FINISH_REASON_UNSPECIFIED;
    if (MayBeToolCalls(position->held) && !last) {
      position->first = first;
      return nullptr;
    }
    json delta = {{"role", "assistant"}};
    std::optional<std::vector<ToolCall>> calls;
    if (last) {
      calls = ParseToolCalls(position->held, absl::StrCat(message.request_id(), "_", index));
    }
    if (calls.has_value()) {
      json list = ToolCallsJson(*calls);
      for (size_t k = 0; k < list.size(); ++k) list[k]["index"] = k;
      delta["content"] = nullptr;
      delta["tool_calls"] = std::move(list);
      if (message.finish_reason() != tpserve::v1::FINISH_REASON_LENGTH) {
        choice["finish_reason"] = "tool_calls";
      }
    } else {
      delta["content"] = std::move(position->held);
      position->text = true;
    }
    position->held.clear();
    choice["delta"] = std::move(delta);
  } else if (IsChat(request)) {
    json delta = {{"content", message.text()}};
    if (first) delta["role"] = "assistant";
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = message.text();
  }
  json chunk = Envelope(header, IsChat(request) ? "chat.completion.chunk" : "text_completion",
                        json::array({std::move(choice)}));
  if (request.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json UsageChunk(const OpenAiRequest& request, const ResponseHeader& header,
                const tpserve::v1::Usage& usage) {
  json chunk = Envelope(header, IsChat(request) ? "chat.completion.chunk" : "text_completion",
                        json::array());
  chunk["usage"] = UsageJson(usage);
  return chunk;
}

std::string SseEvent(const json& object) {
  // Invalid UTF-8 cannot reach here (token texts are made valid upstream); replace anyway
  // rather than throw.
  return absl::StrCat("data: ", object.dump(-1, ' ', false, json::error_handler_t::replace),
                      "\n\n");
}

int HttpStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

json ErrorBody(const absl::Status& status) {
  const int http = HttpStatus(status);
  const json param = Param(status.message());
  const char* type = "server_error";
  json code = nullptr;
  switch (http) {
    case 400:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      code = "invalid_api_key";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "invalid_request_error";
      code = param == "model" ? "model_not_found" : "not_found";
      break;
    case 429:
      type = "rate_limit_error";
      code = "queue_full";
      break;
    case 503:
      type = "service_unavailable_error";
      break;
    case 504:
      type = "timeout_error";
      break;
    default:
      break;
  }
  return {{"error",
           {{"message", static_cast<std::string>(status.message())},
            {"type", type},
            {"param", param},
            {"code", std::move(code)}}}};
}

}  // namespace tpserve::http
