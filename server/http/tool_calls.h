// ToolCalls: OpenAI's function calling (`tools`, `tool_choice`, `parallel_tool_calls`) on a
// model whose chat template has no tool format of its own, in one generic format:
// - the prompt: a system block listing the tools (name, description, parameter schema) and
//   the calling convention, put before the conversation's first message (or appended to its
//   system message); an assistant message's `tool_calls` become its text in the format
//   below, and a `tool` message a user turn `<tool_response name="NAME">CONTENT
//   </tool_response>` (its name found from the call id);
// - the output: one call is `<tool_call>{"name": "NAME", "arguments": {...}}</tool_call>`,
//   several are such calls one per line; a grammar forces the form and each tool's parameter
//   schema (json_schema_to_gbnf.h): `required` one or more calls (exactly one without
//   parallel_tool_calls), a named function its calls only, `auto` either calls or text that
//   does not begin with '<', `none` free text (and the tools are still listed).
// Stateless functions; thread-safe.
#ifndef TPSERVE_SERVER_HTTP_TOOL_CALLS_H_
#define TPSERVE_SERVER_HTTP_TOOL_CALLS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tpserve::http {

struct Tool {
  std::string name;
  std::string description;
  std::string parameters;  // a JSON schema object's text ("{}" when the tool gave none)
};

struct ToolRequest {
  std::vector<Tool> tools;
  enum class Choice { kNone, kAuto, kRequired, kNamed } choice = Choice::kAuto;
  std::string named;  // kNamed: the function
  bool parallel = true;

  // Whether the output may hold calls (tools given, tool_choice other than none).
  bool calls_allowed() const { return !tools.empty() && choice != Choice::kNone; }
};

struct ToolCall {
  std::string id;  // "call_" + request id + index
  std::string name;
  std::string arguments;  // JSON text
};

// `tools`, `tool_choice` and `parallel_tool_calls` of a chat body; InvalidArgument naming the
// field (an unknown function in tool_choice, a tool without a name, a duplicate name, ...).
// Each tool's parameter schema is compiled with the grammar (ToolGrammar) and refused there.
absl::StatusOr<ToolRequest> DecodeTools(const nlohmann::json& body);

// The system block that lists the tools and the calling convention.
std::string ToolSystemBlock(const ToolRequest& tools);

// The GBNF the output keeps to (calls_allowed() only); InvalidArgument naming
// tools[i].function.parameters for a schema that cannot be enforced.
absl::StatusOr<std::string> ToolGrammar(const ToolRequest& tools);

// An assistant message's tool_calls in the output format (as its content).
std::string RenderToolCalls(const std::vector<ToolCall>& calls);

// The calls `text` holds when it is wholly in the output format (whitespace around them
// allowed); nullopt when it is text. Ids are "call_<id_prefix>_<i>".
std::optional<std::vector<ToolCall>> ParseToolCalls(absl::string_view text,
                                                    absl::string_view id_prefix);

// Whether `text` (a stream's output so far) may still become tool calls: it is empty or
// begins with '<' (text for `auto` never does).
bool MayBeToolCalls(absl::string_view text);

}  // namespace tpserve::http

#endif  // TPSERVE_SERVER_HTTP_TOOL_CALLS_H_
