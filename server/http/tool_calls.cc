#include "server/http/tool_calls.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "server/grammar/gbnf.h"
#include "server/grammar/json_schema_to_gbnf.h"

namespace tpserve::http {
namespace {

using nlohmann::json;

constexpr absl::string_view kOpen = "<tool_call>";
constexpr absl::string_view kClose = "</tool_call>";
constexpr size_t kMaxTools = 128;
constexpr size_t kMaxNameBytes = 64;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '-') return false;
  }
  return true;
}

std::string CallHead(absl::string_view name) {
  return absl::StrCat("{\"name\": ", json(absl::StrCat(name)).dump(), ", \"arguments\": ");
}

}  // namespace

absl::StatusOr<ToolRequest> DecodeTools(const json& body) {
  ToolRequest out;
  const auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return Invalid("tools", "must be an array of tools");
    if (tools->size() > kMaxTools) {
      return Invalid("tools",
                     absl::StrCat(tools->size(), " tools exceed the limit of ", kMaxTools));
    }
    absl::flat_hash_set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string field = absl::StrCat("tools[", i, "]");
      if (!t.is_object()) return Invalid(field, "must be an object");
      const auto type = t.find("type");
      if (type == t.end() || *type != "function") {
        return Invalid(absl::StrCat(field, ".type"), "must be \"function\"");
      }
      const auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) {
        return Invalid(absl::StrCat(field, ".function"), "must be an object");
      }
      Tool tool;
      const auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() ||
          !ValidName(name->get_ref<const std::string&>())) {
        return Invalid(absl::StrCat(field, ".function.name"),
                       absl::StrCat("must be 1 to ", kMaxNameBytes,
                                    " letters, digits, underscores or dashes"));
      }
      tool.name = name->get<std::string>();
      if (!names.insert(tool.name).second) {
        return Invalid(absl::StrCat(field, ".function.name"),
                       absl::StrCat("'", tool.name, "' is given twice"));
      }
      const auto description = fn->find("description");
      if (description != fn->end() && !description->is_null()) {
        if (!description->is_string()) {
          return Invalid(absl::StrCat(field, ".function.description"), "must be a string");
        }
        tool.description = description->get<std::string>();
      }
      const auto parameters = fn->find("parameters");
      tool.parameters = "{}";
      if (parameters != fn->end() && !parameters->is_null()) {
        if (!parameters->is_object()) {
          return Invalid(absl::StrCat(field, ".function.parameters"),
                         "must be a JSON schema object");
        }
        tool.parameters = parameters->dump();
      }
      out.tools.push_back(std::move(tool));
    }
  }
  const auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string& c = choice->get_ref<const std::string&>();
      if (c == "none") {
        out.choice = ToolRequest::Choice::kNone;
      } else if (c == "auto") {
        out.choice = ToolRequest::Choice::kAuto;
      } else if (c == "required") {
        out.choice = ToolRequest::Choice::kRequired;
      } else {
        return Invalid("tool_choice", absl::StrCat("'", c,
                                                   "' is not none, auto, required, or a "
                                                   "{\"type\": \"function\", ...} object"));
      }
    } else if (choice->is_object()) {
      const auto fn = choice->find("function");
      const auto name = fn != choice->end() && fn->is_object() ? fn->find("name") : fn;
      if (fn == choice->end() || !fn->is_object() || name == fn->end() || !name->is_string()) {
        return Invalid("tool_choice.function.name", "must name a function");
      }
      out.choice = ToolRequest::Choice::kNamed;
      out.named = name->get<std::string>();
      bool known = false;
      for (const Tool& t : out.tools) known = known || t.name == out.named;
      if (!known) {
        return Invalid("tool_choice.function.name",
                       absl::StrCat("'", out.named, "' is not one of the tools"));
      }
    } else {
      return Invalid("tool_choice", "must be a string or an object");
    }
    if (out.tools.empty() && out.choice != ToolRequest::Choice::kNone &&
        out.choice != ToolRequest::Choice::kAuto) {
      return Invalid("tool_choice", "needs tools");
    }
  }
  const auto parallel = body.find("parallel_tool_calls");
  if (parallel != body.end() && !parallel->is_null()) {
    if (!parallel->is_boolean()) return Invalid("parallel_tool_calls", "must be a boolean");
    out.parallel = parallel->get<bool>();
  }
  return out;
}

std::string ToolSystemBlock(const ToolRequest& request) {
  std::string block =
      "You can call these tools (functions). Each is given as JSON with its name, "
      "description and the JSON schema of its arguments:\n";
  for (const Tool& t : request.tools) {
    absl::StrAppend(&block,
                    json{{"name", t.name},
                         {"description", t.description},
                         {"parameters", json::parse(t.parameters)}}
                        .dump(),
                    "\n");
  }
  absl::StrAppend(
      &block, "To call a tool, reply with only this, one line per call:\n", kOpen,
      "{\"name\": \"<function name>\", \"arguments\": <arguments as JSON>}", kClose,
      "\nA tool's result comes back as <tool_response name=\"...\">...</tool_response>.");
  if (request.choice == ToolRequest::Choice::kAuto) {
    absl::StrAppend(&block, " If no tool is needed, answer in plain text.");
  }
  return block;
}

absl::StatusOr<std::string> ToolGrammar(const ToolRequest& request) {
  std::string rules;
  std::vector<std::string> alternatives;
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const Tool& t = request.tools[i];
    if (request.choice == ToolRequest::Choice::kNamed && t.name != request.named) continue;
    absl::StatusOr<std::string> args = grammar::JsonSchemaToGbnf(t.parameters);
    if (!args.ok()) {
      return Invalid(absl::StrCat("tools[", i, "].function.parameters"), args.status().message());
    }
    const std::string prefix = absl::StrCat("tool", i, "-");
    absl::StrAppend(&rules, grammar::PrefixRuleNames(*args, prefix), "\n");
    alternatives.push_back(
        absl::StrCat(grammar::GbnfLiteral(CallHead(t.name)), " ", prefix, "root"));
  }
  std::string text = absl::StrCat(
      "call ::= ", grammar::GbnfLiteral(kOpen), " (", absl::StrJoin(alternatives, " | "), ") ",
      grammar::GbnfLiteral(absl::StrCat("}", kClose)), "\n",
      request.parallel ? "calls ::= call (\"\\n\" call)*\n" : "calls ::= call\n");
  if (request.choice == ToolRequest::Choice::kAuto) {
    absl::StrAppend(&text, "root ::= calls | free\nfree ::= ([^<] .*)?\n");
  } else {
    absl::StrAppend(&text, "root ::= calls\n");
  }
  return absl::StrCat(text, rules);
}

std::string RenderToolCalls(const std::vector<ToolCall>& calls) {
  std::string out;
  for (const ToolCall& c : calls) {
    if (!out.empty()) out += "\n";
    absl::StrAppend(&out, kOpen, CallHead(c.name), c.arguments, "}", kClose);
  }
  return out;
}

std::optional<std::vector<ToolCall>> ParseToolCalls(absl::string_view text,
                                                    absl::string_view id_prefix) {
  std::vector<ToolCall> calls;
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (rest.empty()) return std::nullopt;
  while (!rest.empty()) {
    if (!absl::ConsumePrefix(&rest, kOpen)) return std::nullopt;
    const size_t end = rest.find(kClose);
    if (end == absl::string_view::npos) return std::nullopt;
    const json call = json::parse(rest.substr(0, end), nullptr, /*allow_exceptions=*/false);
    rest = absl::StripLeadingAsciiWhitespace(rest.substr(end + kClose.size()));
    if (!call.is_object()) return std::nullopt;
    const auto name = call.find("name");
    const auto arguments = call.find("arguments");
    if (name == call.end() || !name->is_string() || arguments == call.end()) return std::nullopt;
    calls.push_back({absl::StrCat("call_", id_prefix, "_", calls.size()), name->get<std::string>(),
                     arguments->dump()});
  }
  return calls;
}

bool MayBeToolCalls(absl::string_view text) {
  const absl::string_view start = absl::StripLeadingAsciiWhitespace(text);
  return start.empty() || start[0] == '<';
}

}  // namespace tpserve::http
