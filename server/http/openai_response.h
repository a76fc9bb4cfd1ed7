// OpenAI responses: the engine's GenerateResponse messages as OpenAI's JSON objects — a whole
// completion / chat.completion, or the chunks of a stream (text_completion /
// chat.completion.chunk) — and errors as {"error": {message, type, param, code}} with their
// HTTP status. The one mapping from absl::Status to HTTP lives here. Stateless functions;
// thread-safe.
#ifndef TPSERVE_SERVER_HTTP_OPENAI_RESPONSE_H_
#define TPSERVE_SERVER_HTTP_OPENAI_RESPONSE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_request.h"
#include "tpserve/v1/generate.pb.h"

namespace tpserve::http {

// What every object of one response repeats.
struct ResponseHeader {
  std::string id;       // "cmpl-…" / "chatcmpl-…"
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// The id of a response for the engine's request id of its first choice.
std::string ResponseId(Endpoint endpoint, absl::string_view request_id);

// Appends a stream message to what a choice has so far (text, token ids and logprobs
// concatenated; the finish reason and usage of the last message that has them).
void Accumulate(const tpserve::v1::GenerateResponse& message, tpserve::v1::GenerateResponse* total);

// A whole response: `choices[i]` is choice i's accumulated messages; usage sums them.
nlohmann::json WholeResponse(const OpenAiRequest& request, const ResponseHeader& header,
                             const std::vector<tpserve::v1::GenerateResponse>& choices);

// Where one choice's stream stands before its next chunk.
struct ChunkPosition {
  bool first = true;        // no chunk of the choice yet
  int64_t text_offset = 0;  // completions logprobs: characters of the token texts so far
  // Chat with tools: the output held back while it may still be tool calls, and whether it
  // has been found to be text (then streamed as it comes).
  std::string held;
  bool text = false;
};

// A stream's chunk for choice `index`: `message`'s text (chat: as a delta), logprobs and, on
// the last, its finish reason. Chat's first chunk of a choice also carries the role.
// Advances `*position` past the chunk. With tools, null (nothing to send yet) while the
// output may still be tool calls; the calls go out in OpenAI's delta shape, all at once.
nlohmann::json StreamChunk(const OpenAiRequest& request, const ResponseHeader& header,
                           uint32_t index, const tpserve::v1::GenerateResponse& message,
                           ChunkPosition* position);

// Adds one choice's usage (its final message's) to the request's: the prompt is shared, the
// completion and speculative counts add up.
void AddChoiceUsage(const tpserve::v1::Usage& choice, tpserve::v1::Usage* total);

// stream_options.include_usage: the last chunk, with no choices and the usage of all.
nlohmann::json UsageChunk(const OpenAiRequest& request, const ResponseHeader& header,
                          const tpserve::v1::Usage& usage);

// One Server-Sent Event: "data: " + json + "\n\n".
std::string SseEvent(const nlohmann::json& object);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// The HTTP status of an error: 400 invalid input, 401 no or a wrong key, 404 another model or
// path, 429 a full queue, 503 not ready or draining, 504 a deadline, 500 the server's fault.
int HttpStatus(const absl::Status& status);
// {"error": {"message", "type", "param", "code"}}; `param` is the field the message names.
nlohmann::json ErrorBody(const absl::Status& status);

}  // namespace tpserve::http

#endif  // TPSERVE_SERVER_HTTP_OPENAI_RESPONSE_H_
