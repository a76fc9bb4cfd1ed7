// OpenAI requests: the JSON bodies of POST /v1/completions and POST /v1/chat/completions
// decoded into tpserve's own GenerateRequest, which then goes through the same
// RequestValidator and BatchEngine as a gRPC request. Only the shape of the JSON is checked
// here (types, the OpenAI-only fields and their ranges); every limit the gRPC API has is
// RequestValidator's. Fields OpenAI defines that tpserve does not implement (tools,
// logit_bias, echo, ...) are refused when set to anything but their default; unknown fields
// are ignored, as OpenAI does. Stateless functions; thread-safe.
#ifndef TPSERVE_SERVER_HTTP_OPENAI_REQUEST_H_
#define TPSERVE_SERVER_HTTP_OPENAI_REQUEST_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "server/http/tool_calls.h"
#include "tpserve/v1/generate.pb.h"

namespace tpserve::http {

enum class Endpoint { kCompletions, kChatCompletions };

// The most choices (`n`) one request may ask for: each is a request of its own to the engine.
inline constexpr uint32_t kMaxChoices = 8;

// max_tokens of a completion that gives none (OpenAI's default).
inline constexpr uint32_t kCompletionsDefaultMaxTokens = 16;

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // as asked for (the served name when the request gave none)
  // What the engine gets for choice 0; choice i differs only in its seed (seed + i) and id.
  tpserve::v1::GenerateRequest generate;
  uint32_t n = 1;  // choices, in [1, kMaxChoices]
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  // Log-probabilities asked for: completions' `logprobs` (an integer), chat's `logprobs`
  // (a boolean) with `top_logprobs`. The engine is asked for max(1, top) and reports the top
  // `top` alternatives beside the chosen token.
  bool logprobs = false;
  uint32_t top_logprobs = 0;
  // The body's name for the output limit, as refusals name it back.
  std::string max_tokens_name = "max_tokens";
  // Chat's tools: listed in the prompt, and (unless tool_choice is none) a grammar of calls.
  ToolRequest tools;
  // What the request called its JSON schema (for messages naming it).
  std::string schema_field = "guided_json";
};

// OK when `model` is `served_model`; NotFound ("model: '…' is not served here") otherwise.
absl::Status CheckServedModel(absl::string_view model, absl::string_view served_model);

// InvalidArgument naming the field (and its limit) for a body that is not a JSON object, a
// field of the wrong type or out of range, or an unsupported feature; NotFound
// ("model_not_found") when `model` names another model than `served_model`.
absl::StatusOr<OpenAiRequest> DecodeOpenAiRequest(Endpoint endpoint, absl::string_view body,
                                                  absl::string_view served_model);

// A refusal of the engine's RequestValidator, which names GenerateRequest's fields, in the
// request's own terms: prompt_token_ids is `prompt`, a chat's logprobs is `top_logprobs`,
// max_tokens is `max_completion_tokens` when the body used that name.
absl::Status InRequestTerms(const absl::Status& status, const OpenAiRequest& request);

}  // namespace tpserve::http

#endif  // TPSERVE_SERVER_HTTP_OPENAI_REQUEST_H_
