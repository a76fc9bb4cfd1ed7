#include "server/http/openai_request.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"

namespace tpserve::http {
namespace {

using nlohmann::json;

absl::Status Wrong(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": must be ", what));
}

absl::Status Unsupported(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what, " is not supported"));
}

// The field, or null when it is absent or JSON null (OpenAI's clients send null for unset).
const json* Field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::optional<bool>> Bool(const json& body, const char* name) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return Wrong(name, "a boolean");
  return v->get<bool>();
}

absl::StatusOr<std::optional<double>> Number(const json& body, const char* name) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return Wrong(name, "a number");
  return v->get<double>();
}

// An integer in [lo, hi]; larger unsigned values read as hi + 1 would, so the caller's range
// check (or the validator's limit) refuses them by value rather than by type.
absl::StatusOr<std::optional<int64_t>> Integer(const json& body, const char* name, int64_t lo,
                                               absl::string_view range) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) return Wrong(name, absl::StrCat("an integer ", range));
  const int64_t value =
      v->is_number_unsigned() && v->get<uint64_t>() > std::numeric_limits<int64_t>::max()
          ? std::numeric_limits<int64_t>::max()
          : v->get<int64_t>();
  if (value < lo) return Wrong(name, absl::StrCat("an integer ", range));
  return value;
}

absl::StatusOr<std::optional<std::string>> String(const json& body, const char* name) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return Wrong(name, "a string");
  return v->get<std::string>();
}

uint32_t ClampU32(int64_t v) {
  return static_cast<uint32_t>(std::min<int64_t>(v, std::numeric_limits<uint32_t>::max()));
}

// Token ids of `field` (an array of integers) into `out`.
absl::Status TokenIds(const json& ids, absl::string_view field,
                      google::protobuf::RepeatedField<int32_t>* out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const json& id = ids[i];
    if (!id.is_number_integer() || id.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Wrong(absl::StrCat(field, "[", i, "]"), "a token id (a 32-bit integer)");
    }
    out->Add(static_cast<int32_t>(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

// `prompt`: a string, token ids, or a list of one of either (a batch of prompts is refused).
absl::Status Prompt(const json& body, tpserve::v1::GenerateRequest* out) {
  const json* p = Field(body, "prompt");
  if (p == nullptr) return absl::InvalidArgumentError("prompt: is required");
  if (p->is_string()) {
    out->set_prompt(p->get<std::string>());
    return absl::OkStatus();
  }
  if (!p->is_array() || p->empty()) {
    return Wrong("prompt", "a string, an array of token ids, or an array of one of these");
  }
  if (p->front().is_number()) return TokenIds(*p, "prompt", out->mutable_prompt_token_ids());
  if (p->size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: ", p->size(), " prompts in one request; the limit is 1 (send one each)"));
  }
  const json& only = p->front();
  if (only.is_string()) {
    out->set_prompt(only.get<std::string>());
    return absl::OkStatus();
  }
  if (only.is_array() && !only.empty()) {
    return TokenIds(only, "prompt[0]", out->mutable_prompt_token_ids());
  }
  return Wrong("prompt[0]", "a string or a non-empty array of token ids");
}

// A message's content: a string, null, or an array of text parts, joined.
absl::StatusOr<std::string> Content(const json& message, absl::string_view field) {
  const json* c = Field(message, "content");
  if (c == nullptr) return std::string();
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) return Wrong(field, "a string or an array of content parts");
  std::string text;
  for (size_t i = 0; i < c->size(); ++i) {
    const json& part = (*c)[i];
    const std::string name = absl::StrCat(field, "[", i, "]");
    if (!part.is_object()) return Wrong(name, "an object");
    const json* type = Field(part, "type");
    if (type == nullptr || !type->is_string()) {
      return Wrong(absl::StrCat(name, ".type"), "a string");
    }
    if (type->get<std::string>() != "text") {
      return Unsupported(absl::StrCat(name, ".type"),
                         absl::StrCat("content of type '", type->get<std::string>(), "'"));
    }
    const json* t = Field(part, "text");
    if (t == nullptr || !t->is_string()) return Wrong(absl::StrCat(name, ".text"), "a string");
    text += t->get<std::string>();
  }
  return text;
}

// An assistant message's tool_calls, as ToolCalls; records each id's function in `names`.
absl::StatusOr<std::vector<ToolCall>> AssistantCalls(
    const json& calls, const std::string& field,
    absl::flat_hash_map<std::string, std::string>* names) {
  if (!calls.is_array()) return Wrong(field, "an array of tool calls");
  std::vector<ToolCall> out;
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string name = absl::StrCat(field, "[", k, "]");
    const json& c = calls[k];
    const json* fn = c.is_object() ? Field(c, "function") : nullptr;
    if (fn == nullptr || !fn->is_object()) {
      return Wrong(absl::StrCat(name, ".function"), "an object");
    }
    ToolCall call;
    ASSIGN_OR_RETURN(std::optional<std::string> id, String(c, "id"));
    ASSIGN_OR_RETURN(std::optional<std::string> fn_name, String(*fn, "name"));
    if (!fn_name.has_value()) return Wrong(absl::StrCat(name, ".function.name"), "a string");
    call.id = id.value_or("");
    call.name = *fn_name;
    // OpenAI sends the arguments as JSON text; the prompt shows them as JSON.
    ASSIGN_OR_RETURN(std::optional<std::string> arguments, String(*fn, "arguments"));
    const json parsed = json::parse(arguments.value_or("{}"), nullptr, false);
    if (parsed.is_discarded()) {
      return Wrong(absl::StrCat(name, ".function.arguments"), "JSON text");
    }
    call.arguments = parsed.dump();
    if (!call.id.empty()) (*names)[call.id] = call.name;
    out.push_back(std::move(call));
  }
  return out;
}

absl::Status Messages(const json& body, const ToolRequest& tools,
                      tpserve::v1::GenerateRequest* out) {
  const json* m = Field(body, "messages");
  if (m == nullptr) return absl::InvalidArgumentError("messages: is required");
  if (!m->is_array() || m->empty()) return Wrong("messages", "a non-empty array of messages");
  absl::flat_hash_map<std::string, std::string> call_names;  // tool call id -> function
  for (size_t i = 0; i < m->size(); ++i) {
    const json& message = (*m)[i];
    const std::string name = absl::StrCat("messages[", i, "]");
    if (!message.is_object()) return Wrong(name, "an object");
    const json* role = Field(message, "role");
    if (role == nullptr || !role->is_string()) {
      return Wrong(absl::StrCat(name, ".role"), "a string");
    }
    tpserve::v1::ChatMessage* chat = out->add_messages();
    // OpenAI's "developer" is its newer name for "system".
    const std::string& named = role->get_ref<const std::string&>();
    chat->set_role(named == "developer" ? "system" : named);
    ASSIGN_OR_RETURN(*chat->mutable_content(), Content(message, absl::StrCat(name, ".content")));
    if (const json* calls = Field(message, "tool_calls");
        calls != nullptr && named == "assistant") {
      ASSIGN_OR_RETURN(std::vector<ToolCall> parsed,
                       AssistantCalls(*calls, absl::StrCat(name, ".tool_calls"), &call_names));
      if (!chat->content().empty()) chat->mutable_content()->append("\n");
      chat->mutable_content()->append(RenderToolCalls(parsed));
    }
    if (named == "tool") {  // the generic format's tool response, in a user turn
      ASSIGN_OR_RETURN(std::optional<std::string> id, String(message, "tool_call_id"));
      const auto called = id.has_value() ? call_names.find(*id) : call_names.end();
      if (called == call_names.end()) {
        return Wrong(absl::StrCat(name, ".tool_call_id"),
                     "the id of a tool call of an earlier assistant message");
      }
      chat->set_role("user");
      *chat->mutable_content() = absl::StrCat("<tool_response name=\"", called->second, "\">",
                                              chat->content(), "</tool_response>");
    }
  }
  if (!tools.tools.empty()) {  // the tools' system block leads the conversation
    const std::string block = ToolSystemBlock(tools);
    if (out->messages(0).role() == "system") {
      out->mutable_messages(0)->mutable_content()->append(absl::StrCat("\n\n", block));
    } else {
      tpserve::v1::ChatMessage system;
      system.set_role("system");
      system.set_content(block);
      *out->add_messages() = std::move(system);
      for (int k = out->messages_size() - 1; k > 0; --k) {
        out->mutable_messages()->SwapElements(k, k - 1);
      }
    }
  }
  return absl::OkStatus();
}

// `stop`: a string or an array of strings.
absl::Status Stop(const json& body, tpserve::v1::GenerateRequest* out) {
  const json* s = Field(body, "stop");
  if (s == nullptr) return absl::OkStatus();
  if (s->is_string()) {
    out->add_stop(s->get<std::string>());
    return absl::OkStatus();
  }
  if (!s->is_array()) return Wrong("stop", "a string or an array of strings");
  for (size_t i = 0; i < s->size(); ++i) {
    if (!(*s)[i].is_string()) return Wrong(absl::StrCat("stop[", i, "]"), "a string");
    out->add_stop((*s)[i].get<std::string>());
  }
  return absl::OkStatus();
}

// The sampling fields every endpoint shares, into `out`.
absl::Status Sampling(const json& body, tpserve::v1::GenerateRequest* out) {
  const std::pair<const char*, void (tpserve::v1::GenerateRequest::*)(float)> floats[] = {
      {"temperature", &tpserve::v1::GenerateRequest::set_temperature},
      {"top_p", &tpserve::v1::GenerateRequest::set_top_p},
      {"min_p", &tpserve::v1::GenerateRequest::set_min_p},
      {"typical_p", &tpserve::v1::GenerateRequest::set_typical_p},
      {"frequency_penalty", &tpserve::v1::GenerateRequest::set_frequency_penalty},
      {"presence_penalty", &tpserve::v1::GenerateRequest::set_presence_penalty},
      {"repetition_penalty", &tpserve::v1::GenerateRequest::set_repetition_penalty},
  };
  for (const auto& [name, set] : floats) {
    ASSIGN_OR_RETURN(std::optional<double> v, Number(body, name));
    if (v.has_value()) (out->*set)(static_cast<float>(*v));
  }
  // top_k: -1 is "off" in vLLM's API, as 0 is in tpserve's.
  ASSIGN_OR_RETURN(std::optional<int64_t> top_k, Integer(body, "top_k", -1, "of at least -1"));
  if (top_k.has_value()) {
    out->set_top_k(static_cast<int32_t>(std::clamp<int64_t>(*top_k, 0, INT32_MAX)));
  }
  // seed: any 64-bit integer, as OpenAI and vLLM take it (a negative one as its two's
  // complement: the same seed, the same draws).
  if (const json* seed = Field(body, "seed"); seed != nullptr) {
    if (!seed->is_number_integer()) return Wrong("seed", "an integer");
    out->set_seed(seed->is_number_unsigned() ? seed->get<uint64_t>()
                                             : static_cast<uint64_t>(seed->get<int64_t>()));
  }
  // max_completion_tokens is the newer name of max_tokens and wins when both are given.
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    ASSIGN_OR_RETURN(std::optional<int64_t> max, Integer(body, name, 1, "of at least 1"));
    if (!max.has_value()) continue;
    if (*max > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": ", *max, " exceeds ", std::numeric_limits<uint32_t>::max()));
    }
    out->set_max_tokens(static_cast<uint32_t>(*max));
  }
  RETURN_IF_ERROR(Stop(body, out));
  if (const json* ids = Field(body, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return Wrong("stop_token_ids", "an array of token ids");
    RETURN_IF_ERROR(TokenIds(*ids, "stop_token_ids", out->mutable_stop_token_ids()));
  }
  ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, Bool(body, "ignore_eos"));
  out->set_ignore_eos(ignore_eos.value_or(false));
  ASSIGN_OR_RETURN(std::optional<std::string> user, String(body, "user"));  // checked, unused
  return absl::OkStatus();
}

// Completions: `logprobs` is the number of alternatives (0: the chosen token's only).
// Chat: `logprobs` is a boolean and `top_logprobs` the number of alternatives.
absl::Status Logprobs(const json& body, OpenAiRequest* out) {
  if (out->endpoint == Endpoint::kCompletions) {
    ASSIGN_OR_RETURN(std::optional<int64_t> n, Integer(body, "logprobs", 0, "of at least 0"));
    out->logprobs = n.has_value();
    out->top_logprobs = ClampU32(n.value_or(0));
  } else {
    ASSIGN_OR_RETURN(std::optional<bool> on, Bool(body, "logprobs"));
    ASSIGN_OR_RETURN(std::optional<int64_t> n, Integer(body, "top_logprobs", 0, "of at least 0"));
    if (n.has_value() && !on.value_or(false)) {
      return absl::InvalidArgumentError("top_logprobs: needs logprobs set to true");
    }
    out->logprobs = on.value_or(false);
    out->top_logprobs = ClampU32(n.value_or(0));
  }
  // The engine's `logprobs` is the number of alternatives with the chosen token's always
  // reported; at least 1 so that the chosen token's comes back at all.
  if (out->logprobs) out->generate.set_logprobs(std::max<uint32_t>(1, out->top_logprobs));
  return absl::OkStatus();
}

// Fields of OpenAI's API that tpserve does not implement: refused unless left at their default.
absl::Status Unimplemented(const json& body, const OpenAiRequest& request) {
  ASSIGN_OR_RETURN(std::optional<bool> echo, Bool(body, "echo"));
  if (echo.value_or(false)) return Unsupported("echo", "true");
  ASSIGN_OR_RETURN(std::optional<std::string> suffix, String(body, "suffix"));
  if (suffix.has_value() && !suffix->empty()) return Unsupported("suffix", "a suffix");
  ASSIGN_OR_RETURN(std::optional<int64_t> best_of, Integer(body, "best_of", 1, "of at least 1"));
  if (best_of.has_value() && *best_of != request.n) {
    return Unsupported("best_of", "a value other than n");
  }
  for (const char* name : {"logit_bias", "functions"}) {
    const json* v = Field(body, name);
    if (v != nullptr && !v->empty()) return Unsupported(name, "a non-empty value");
  }
  return absl::OkStatus();
}

// The body's values as JSON text with their objects' keys in the order the client wrote
// them (`json` reads them sorted): a schema's `properties` order is the output's. Parsed
// once, and only when asked.
class ClientOrder {
 public:
  explicit ClientOrder(absl::string_view text) : text_(text) {}

  // The value at JSON pointer `at`; empty when there is none.
  std::string Dump(const std::string& at) {
    if (!parsed_) {
      doc_ = nlohmann::ordered_json::parse(text_.begin(), text_.end(), nullptr,
                                           /*allow_exceptions=*/false);
      parsed_ = true;
    }
    const nlohmann::ordered_json::json_pointer pointer(at);
    if (doc_.is_discarded() || !doc_.contains(pointer)) return "";
    return doc_.at(pointer).dump();
  }

 private:
  const absl::string_view text_;
  bool parsed_ = false;
  nlohmann::ordered_json doc_;
};

// response_format (OpenAI's text, json_object and json_schema) and vLLM's guided_json,
// guided_regex and guided_grammar, as GenerateRequest.structured_output: at most one.
absl::Status ResponseFormat(const json& body, OpenAiRequest* out) {
  tpserve::v1::StructuredOutput* so = out->generate.mutable_structured_output();
  int given = 0;
  if (const json* format = Field(body, "response_format"); format != nullptr) {
    if (!format->is_object()) return Wrong("response_format", "an object");
    ASSIGN_OR_RETURN(std::optional<std::string> type, String(*format, "type"));
    if (!type.has_value()) return absl::InvalidArgumentError("response_format.type: required");
    if (*type == "json_object") {
      so->set_json_object(true);
      ++given;
    } else if (*type == "json_schema") {
      const json* spec = Field(*format, "json_schema");
      if (spec == nullptr || !spec->is_object()) {
        return Wrong("response_format.json_schema", "an object with a schema");
      }
      ASSIGN_OR_RETURN(std::optional<std::string> name, String(*spec, "name"));
      ASSIGN_OR_RETURN(std::optional<bool> strict, Bool(*spec, "strict"));
      (void)name;    // OpenAI's label for the schema; it constrains nothing
      (void)strict;  // the output always keeps to the schema
      const json* schema = Field(*spec, "schema");
      if (schema == nullptr || !schema->is_object()) {
        return Wrong("response_format.json_schema.schema", "a JSON schema object");
      }
      so->set_json_schema(schema->dump());
      out->schema_field = "response_format.json_schema.schema";
      ++given;
    } else if (*type != "text") {
      return absl::InvalidArgumentError(absl::StrCat(
          "response_format.type: '", *type, "' is not one of text, json_object, json_schema"));
    }
  }
  if (const json* schema = Field(body, "guided_json"); schema != nullptr) {
    if (schema->is_string()) {
      so->set_json_schema(schema->get<std::string>());
    } else if (schema->is_object()) {
      so->set_json_schema(schema->dump());
    } else {
      return Wrong("guided_json", "a JSON schema (an object, or its text)");
    }
    ++given;
  }
  for (const char* name : {"guided_regex", "guided_grammar"}) {
    ASSIGN_OR_RETURN(std::optional<std::string> text, String(body, name));
    if (!text.has_value()) continue;
    if (absl::string_view(name) == "guided_regex") {
      so->set_regex(*text);
    } else {
      so->set_grammar(*text);
    }
    ++given;
  }
  if (given > 1) {
    return absl::InvalidArgumentError(
        "response_format: give at most one of response_format (json), guided_json, "
        "guided_regex and guided_grammar");
  }
  if (given == 0) out->generate.clear_structured_output();
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckServedModel(absl::string_view model, absl::string_view served_model) {
  if (model == served_model) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      "model: '", model, "' is not served here; this server serves '", served_model, "'"));
}

absl::StatusOr<OpenAiRequest> DecodeOpenAiRequest(Endpoint endpoint, absl::string_view body_text,
                                                  absl::string_view served_model) {
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return absl::InvalidArgumentError("body: is not valid JSON");
  if (!body.is_object()) return Wrong("body", "a JSON object");
  ClientOrder order(body_text);
  OpenAiRequest request;
  request.endpoint = endpoint;
  ASSIGN_OR_RETURN(std::optional<std::string> model, String(body, "model"));
  request.model = model.value_or(static_cast<std::string>(served_model));
  RETURN_IF_ERROR(CheckServedModel(request.model, served_model));
  if (endpoint == Endpoint::kCompletions) {
    if (const json* tools = Field(body, "tools"); tools != nullptr && !tools->empty()) {
      return Unsupported("tools", "tools on completions (they are chat's)");
    }
    RETURN_IF_ERROR(Prompt(body, &request.generate));
  } else {
    ASSIGN_OR_RETURN(request.tools, DecodeTools(body));
    for (size_t i = 0; i < request.tools.tools.size(); ++i) {
      std::string ordered = order.Dump(absl::StrCat("/tools/", i, "/function/parameters"));
      if (!ordered.empty() && ordered != "null") request.tools.tools[i].parameters = ordered;
    }
    RETURN_IF_ERROR(Messages(body, request.tools, &request.generate));
  }
  RETURN_IF_ERROR(Sampling(body, &request.generate));
  if (Field(body, "max_completion_tokens") != nullptr) {
    request.max_tokens_name = "max_completion_tokens";
  }
  // Unset max_tokens: OpenAI's completions default to 16 tokens; chat keeps 0, which the
  // server fills with the rest of the context (MaxTokensUnset::kRestOfContext), as vLLM does.
  if (endpoint == Endpoint::kCompletions && request.generate.max_tokens() == 0) {
    request.generate.set_max_tokens(kCompletionsDefaultMaxTokens);
  }
  RETURN_IF_ERROR(Logprobs(body, &request));
  ASSIGN_OR_RETURN(std::optional<int64_t> n,
                   Integer(body, "n", 1, absl::StrCat("in [1, ", kMaxChoices, "]")));
  if (n.value_or(1) > kMaxChoices) {
    return absl::InvalidArgumentError(absl::StrCat("n: ", *n, " exceeds the limit ", kMaxChoices));
  }
  request.n = static_cast<uint32_t>(n.value_or(1));
  ASSIGN_OR_RETURN(std::optional<bool> stream, Bool(body, "stream"));
  request.stream = stream.value_or(false);
  if (const json* options = Field(body, "stream_options"); options != nullptr) {
    if (!request.stream) {
      return absl::InvalidArgumentError("stream_options: is only allowed with stream: true");
    }
    if (!options->is_object()) return Wrong("stream_options", "an object");
    const json* usage = Field(*options, "include_usage");
    if (usage != nullptr && !usage->is_boolean()) {
      return Wrong("stream_options.include_usage", "a boolean");
    }
    request.include_usage = usage != nullptr && usage->get<bool>();
  }
  RETURN_IF_ERROR(Unimplemented(body, request));
  RETURN_IF_ERROR(ResponseFormat(body, &request));
  if (request.generate.has_structured_output() &&
      request.generate.structured_output().has_json_schema()) {
    const bool whole = request.schema_field == "response_format.json_schema.schema";
    const json* guided = Field(body, "guided_json");
    if (whole || (guided != nullptr && guided->is_object())) {
      std::string ordered =
          order.Dump(whole ? "/response_format/json_schema/schema" : "/guided_json");
      if (!ordered.empty()) request.generate.mutable_structured_output()->set_json_schema(ordered);
    }
  }
  if (request.tools.calls_allowed()) {
    if (request.generate.has_structured_output()) {
      return absl::InvalidArgumentError(
          "tools: cannot be combined with response_format or guided_* (set tool_choice to "
          "none for a structured answer)");
    }
    ASSIGN_OR_RETURN(*request.generate.mutable_structured_output()->mutable_grammar(),
                     ToolGrammar(request.tools));
  }
  return request;
}

absl::Status InRequestTerms(const absl::Status& status, const OpenAiRequest& request) {
  const absl::string_view message = status.message();
  const auto renamed = [&](absl::string_view engine_name, absl::string_view http_name) {
    return absl::Status(status.code(), absl::StrCat(http_name, message.substr(engine_name.size())));
  };
  if (absl::StartsWith(message, "prompt_token_ids")) return renamed("prompt_token_ids", "prompt");
  if (request.endpoint == Endpoint::kChatCompletions && absl::StartsWith(message, "logprobs")) {
    return renamed("logprobs", "top_logprobs");
  }
  if (absl::StartsWith(message, "max_tokens")) {
    return renamed("max_tokens", request.max_tokens_name);
  }
  if (absl::StartsWith(message, "structured_output.json_schema")) {
    return renamed("structured_output.json_schema", request.schema_field);
  }
  if (absl::StartsWith(message, "structured_output.regex")) {
    return renamed("structured_output.regex", "guided_regex");
  }
  if (absl::StartsWith(message, "structured_output.grammar")) {
    return renamed("structured_output.grammar", "guided_grammar");
  }
  if (absl::StartsWith(message, "structured_output")) {
    return renamed("structured_output", "response_format");
  }
  return status;
}

}  // namespace tpserve::http
