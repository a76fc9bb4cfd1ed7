#include "server/coordinator/request_validator.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/common/proto_wire_tally.h"
#include "server/common/status_macros.h"
#include "server/coordinator/finish_rule.h"
#include "server/grammar/token_constraint.h"

namespace tpserve::coordinator {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// InvalidArgument "<field>: <n> <what> exceed <limit_name> <limit>" when n > limit.
absl::Status AtMost(const char* field, uint64_t n, const char* what, const char* limit_name,
                    uint64_t limit) {
  if (n <= limit) return absl::OkStatus();
  return Invalid(absl::StrCat(field, ": ", n, " ", what, " exceed ", limit_name, " ", limit));
}

template <typename Messages>
RequestSize PromptSize(const std::string& prompt, const Messages& messages, uint64_t ids) {
  RequestSize size;
  size.prompt_bytes = prompt.size();
  size.messages = static_cast<uint64_t>(messages.size());
  for (const auto& m : messages) size.message_bytes += m.content().size();
  size.prompt_token_ids = ids;
  return size;
}

}  // namespace

uint64_t RequestValidator::PromptByteLimit() const {
  return std::min<uint64_t>(limits_.max_prompt_bytes,
                            static_cast<uint64_t>(limits_.max_input_tokens) * 64 + 4096);
}

absl::Status RequestValidator::CheckSize(const RequestSize& size) const {
  RETURN_IF_ERROR(AtMost("request_id", size.request_id_bytes, "bytes", "max_request_id_bytes",
                         limits_.max_request_id_bytes));
  RETURN_IF_ERROR(
      AtMost("messages", size.messages, "messages", "max_messages", limits_.max_messages));
  RETURN_IF_ERROR(AtMost("messages", size.message_bytes, "bytes of content", "max_prompt_bytes",
                         PromptByteLimit()));
  RETURN_IF_ERROR(
      AtMost("prompt", size.prompt_bytes, "bytes", "max_prompt_bytes", PromptByteLimit()));
  RETURN_IF_ERROR(AtMost("prompt_token_ids", size.prompt_token_ids, "ids", "max_input_tokens",
                         limits_.max_input_tokens));
  RETURN_IF_ERROR(
      AtMost("stop", size.stop, "strings", "max_stop_sequences", limits_.max_stop_sequences));
  RETURN_IF_ERROR(AtMost("stop_token_ids", size.stop_token_ids, "ids", "max_stop_token_ids",
                         limits_.max_stop_token_ids));
  // No sequence the server holds is longer: Detokenize needs no more.
  RETURN_IF_ERROR(
      AtMost("token_ids", size.token_ids, "ids", "max_total_tokens", limits_.max_total_tokens));
  RETURN_IF_ERROR(AtMost("resume.token_ids", size.resume_token_ids, "ids", "max_new_tokens",
                         limits_.max_new_tokens));
  return absl::OkStatus();
}

absl::Status RequestValidator::CheckWire(const google::protobuf::Descriptor& type,
                                         std::string_view wire) const {
  const WireTallies tallies = TallyWireFields(type, wire);
  auto tally = [&](const google::protobuf::Descriptor& t, const char* name) {
    const google::protobuf::FieldDescriptor* field = t.FindFieldByName(name);
    if (field == nullptr) return WireTally{};
    auto it = tallies.find(field);
    return it == tallies.end() ? WireTally{} : it->second;
  };
  const google::protobuf::Descriptor& message = *tpserve::v1::ChatMessage::descriptor();
  RequestSize size;
  size.prompt_bytes =
      static_cast<uint64_t>(tally(type, "prompt").bytes + tally(type, "text").bytes);
  size.messages = static_cast<uint64_t>(tally(type, "messages").elements);
  size.message_bytes = static_cast<uint64_t>(tally(message, "content").bytes);
  size.prompt_token_ids = static_cast<uint64_t>(tally(type, "prompt_token_ids").elements);
  size.stop = static_cast<uint64_t>(tally(type, "stop").elements);
  size.stop_token_ids = static_cast<uint64_t>(tally(type, "stop_token_ids").elements);
  size.request_id_bytes = static_cast<uint64_t>(tally(type, "request_id").bytes);
  size.token_ids = static_cast<uint64_t>(tally(type, "token_ids").elements);
  size.resume_token_ids =
      static_cast<uint64_t>(tally(*tpserve::v1::Resume::descriptor(), "token_ids").elements);
  return CheckSize(size);
}

absl::Status RequestValidator::CheckIds(const google::protobuf::RepeatedField<int32_t>& ids,
                                        const char* field) const {
  for (int i = 0; i < ids.size(); ++i) {
    if (!tokenizer_.IsValidId(ids[i])) {
      return Invalid(absl::StrCat(field, "[", i, "]: ", ids[i], " is outside the vocabulary [0, ",
                                  tokenizer_.vocab_size(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> RequestValidator::PromptIds(
    const std::string& prompt,
    const google::protobuf::RepeatedPtrField<tpserve::v1::ChatMessage>& messages,
    const google::protobuf::RepeatedField<int32_t>& ids, bool add_special) const {
  const int kinds = (prompt.empty() ? 0 : 1) + (messages.empty() ? 0 : 1) + (ids.empty() ? 0 : 1);
  if (kinds != 1) {
    return Invalid(
        absl::StrCat("prompt: exactly one of prompt, messages and prompt_token_ids "
                     "must be given, got ",
                     kinds));
  }
  // Sizes first: refuse before spending time rendering or encoding.
  RETURN_IF_ERROR(CheckSize(PromptSize(prompt, messages, static_cast<uint64_t>(ids.size()))));
  std::vector<int32_t> out;
  if (!ids.empty()) {
    RETURN_IF_ERROR(CheckIds(ids, "prompt_token_ids"));
    out.assign(ids.begin(), ids.end());
  } else if (!prompt.empty()) {
    // Raw prompts spell special tokens as text, as Hugging Face tokenizers read them.
    ASSIGN_OR_RETURN(out, tokenizer_.Encode(prompt, add_special));
  } else {
    if (chat_ == nullptr) return Invalid("messages: the model has no chat template");
    std::vector<model::ChatMessage> chat;
    chat.reserve(static_cast<size_t>(messages.size()));
    for (int i = 0; i < messages.size(); ++i) {
      const std::string& role = messages[i].role();
      if (role != "system" && role != "user" && role != "assistant") {
        return Invalid(absl::StrCat("messages[", i, "].role: '", role.substr(0, 64),
                                    "' is not one of system, user, assistant"));
      }
      chat.push_back({role, messages[i].content()});
    }
    // Content is tokenised as plain text: a message cannot open a turn of its own.
    absl::StatusOr<std::vector<int32_t>> encoded = chat_->Encode(chat);
    if (!encoded.ok()) return Invalid(absl::StrCat("messages: ", encoded.status().message()));
    out = *std::move(encoded);
  }
  if (out.empty()) return Invalid("prompt: the prompt has no tokens");
  if (out.size() > limits_.max_input_tokens) {
    return Invalid(absl::StrCat("prompt: ", out.size(), " tokens exceed max_input_tokens ",
                                limits_.max_input_tokens));
  }
  return out;
}

absl::Status RequestValidator::ValidateResume(const tpserve::v1::GenerateRequest& r,
                                              RequestSpec* spec) const {
  if (!r.has_resume()) return absl::OkStatus();
  const tpserve::v1::Resume& resume = r.resume();
  if (resume.has_seed()) {
    if (spec->seed.has_value() && *spec->seed != resume.seed()) {
      return Invalid(
          absl::StrCat("resume.seed: ", resume.seed(), " contradicts seed ", *spec->seed));
    }
    spec->seed = resume.seed();
  }
  const auto received = static_cast<int64_t>(resume.token_ids_size());
  if (received >= spec->max_tokens) {
    return Invalid(absl::StrCat("resume.token_ids: ", received, " tokens already reach max_tokens ",
                                spec->max_tokens, "; the stream had ended"));
  }
  if (received > 0 && !spec->seed.has_value() && spec->sampling.temperature > 0.0f) {
    return Invalid(
        "resume.seed: required to resume a sampled request that sets no seed (the seed is "
        "reported on the stream's first message)");
  }
  RETURN_IF_ERROR(CheckIds(resume.token_ids(), "resume.token_ids"));
  std::optional<grammar::TokenConstraint> constraint;
  if (spec->grammar != nullptr) {
    constraint.emplace(spec->grammar, EndTokenIds(tokenizer_.eos_id(), spec->ignore_eos,
                                                  spec->sampling.stop_token_ids));
  }
  for (int i = 0; i < resume.token_ids_size(); ++i) {
    const int32_t id = resume.token_ids(i);
    const tpserve::v1::FinishReason ended =
        TokenFinish(id, tokenizer_.eos_id(), spec->ignore_eos, spec->sampling.stop_token_ids);
    if (ended != tpserve::v1::FINISH_REASON_UNSPECIFIED) {
      return Invalid(absl::StrCat(
          "resume.token_ids[", i, "]: ", id, " is ",
          ended == tpserve::v1::FINISH_REASON_EOS ? "the end-of-sequence token" : "a stop token id",
          "; the stream had ended there"));
    }
    if (!constraint.has_value()) continue;
    if (constraint->Ended()) {
      return Invalid(absl::StrCat("resume.token_ids[", i,
                                  "]: the structured_output grammar had ended before it"));
    }
    if (absl::Status taken = constraint->Accept(id, tokenizer_.TokenBytes(id)); !taken.ok()) {
      return Invalid(
          absl::StrCat("resume.token_ids[", i, "]: ", taken.message(), " (structured_output)"));
    }
  }
  if (constraint.has_value() && constraint->Ended()) {
    return Invalid(
        "resume.token_ids: the structured_output grammar had ended; the stream had "
        "ended there");
  }
  spec->resumed.assign(resume.token_ids().begin(), resume.token_ids().end());
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> RequestValidator::Grammar(
    const tpserve::v1::StructuredOutput& output) const {
  using Out = tpserve::v1::StructuredOutput;
  grammar::GrammarKind kind;
  std::string_view text;
  switch (output.kind_case()) {
    case Out::kJsonSchema:
      kind = grammar::GrammarKind::kJsonSchema;
      text = output.json_schema();
      break;
    case Out::kRegex:
      kind = grammar::GrammarKind::kRegex;
      text = output.regex();
      break;
    case Out::kGrammar:
      kind = grammar::GrammarKind::kGbnf;
      text = output.grammar();
      break;
    case Out::kJsonObject:
      if (!output.json_object()) return Invalid("structured_output.json_object: must be true");
      kind = grammar::GrammarKind::kJsonObject;
      break;
    default:
      return Invalid("structured_output: set one of json_schema, regex, grammar, json_object");
  }
  absl::call_once(grammars_once_, [this] {
    std::vector<std::string> bytes;
    std::vector<bool> special;
    for (int32_t id = 0; id < tokenizer_.vocab_size(); ++id) {
      bytes.emplace_back(tokenizer_.TokenBytes(id));
      // The end tokens (EOS, stop ids) are allowed by TokenConstraint, per request.
      special.push_back(tokenizer_.IsSpecial(id) || id == tokenizer_.eos_id());
    }
    grammars_ = std::make_unique<grammar::GrammarCache>(
        std::make_shared<const grammar::TokenTrie>(bytes, special, /*eos_id=*/-1));
  });
  return grammars_->Get(kind, absl::string_view(text.data(), text.size()));
}

absl::StatusOr<RequestSpec> RequestValidator::Validate(const tpserve::v1::GenerateRequest& r,
                                                       MaxTokensUnset unset) const {
  RequestSpec spec;
  RequestSize size = PromptSize(r.prompt(), r.messages(), r.prompt_token_ids_size());
  size.stop = static_cast<uint64_t>(r.stop_size());
  size.stop_token_ids = static_cast<uint64_t>(r.stop_token_ids_size());
  size.request_id_bytes = r.request_id().size();
  size.resume_token_ids = static_cast<uint64_t>(r.resume().token_ids_size());
  RETURN_IF_ERROR(CheckSize(size));
  for (size_t i = 0; i < r.request_id().size(); ++i) {
    const auto c = static_cast<unsigned char>(r.request_id()[i]);
    if (c < 0x20 || c > 0x7E) {  // it is echoed into logs: no control characters
      return Invalid(absl::StrFormat(
          "request_id: byte %d is 0x%02x; only printable ASCII (0x20-0x7e) is allowed", i, c));
    }
  }
  spec.request_id = r.request_id();
  const bool fill = r.max_tokens() == 0 && unset == MaxTokensUnset::kRestOfContext;
  if (r.max_tokens() == 0 && !fill) return Invalid("max_tokens: must be at least 1, got 0");
  if (r.max_tokens() > limits_.max_new_tokens) {
    return Invalid(absl::StrCat("max_tokens: ", r.max_tokens(), " exceeds max_new_tokens ",
                                limits_.max_new_tokens));
  }
  spec.max_tokens = fill ? limits_.max_new_tokens : r.max_tokens();  // capped below when filled

  engine::SamplingParams& p = spec.sampling;
  p.temperature = r.has_temperature() ? r.temperature() : 1.0f;
  if (r.has_top_k()) p.top_k = r.top_k();
  if (r.has_top_p()) p.top_p = r.top_p();
  if (r.has_min_p()) p.min_p = r.min_p();
  if (r.has_typical_p()) p.typical_p = r.typical_p();
  if (r.has_repetition_penalty()) p.repetition_penalty = r.repetition_penalty();
  if (r.has_frequency_penalty()) p.frequency_penalty = r.frequency_penalty();
  if (r.has_presence_penalty()) p.presence_penalty = r.presence_penalty();
  RETURN_IF_ERROR(CheckIds(r.stop_token_ids(), "stop_token_ids"));
  p.stop_token_ids.assign(r.stop_token_ids().begin(), r.stop_token_ids().end());
  RETURN_IF_ERROR(engine::ValidateSamplingParams(p, tokenizer_.vocab_size()));
  if (r.logprobs() > limits_.max_logprobs) {
    return Invalid(
        absl::StrCat("logprobs: ", r.logprobs(), " exceeds the limit ", limits_.max_logprobs));
  }
  p.logprobs = r.logprobs();
  if (r.has_seed()) spec.seed = r.seed();

  for (int i = 0; i < r.stop_size(); ++i) {
    if (r.stop(i).empty()) return Invalid(absl::StrCat("stop[", i, "]: empty stop string"));
    if (r.stop(i).size() > limits_.max_stop_bytes) {
      return Invalid(absl::StrCat("stop[", i, "]: ", r.stop(i).size(),
                                  " bytes exceed max_stop_bytes ", limits_.max_stop_bytes));
    }
    spec.stop.push_back(r.stop(i));
  }
  spec.ignore_eos = r.ignore_eos();
  if (r.has_structured_output()) {
    ASSIGN_OR_RETURN(spec.grammar, Grammar(r.structured_output()));
  }
  RETURN_IF_ERROR(ValidateResume(r, &spec));

  ASSIGN_OR_RETURN(spec.prompt, PromptIds(r.prompt(), r.messages(), r.prompt_token_ids(),
                                          /*add_special=*/true));
  if (fill) {  // resumed tokens are output: within max_tokens, which this caps
    const int64_t room =
        static_cast<int64_t>(limits_.max_total_tokens) - static_cast<int64_t>(spec.prompt.size());
    if (room <= static_cast<int64_t>(spec.resumed.size())) {
      return Invalid(absl::StrCat("messages: the prompt (", spec.prompt.size(),
                                  " tokens) leaves no room for output under max_total_tokens ",
                                  limits_.max_total_tokens));
    }
    spec.max_tokens = std::min(spec.max_tokens, room);
  }
  const uint64_t total = spec.prompt.size() + static_cast<uint64_t>(spec.max_tokens);
  if (total > limits_.max_total_tokens) {
    return Invalid(absl::StrCat("max_tokens: prompt (", spec.prompt.size(),
                                " tokens) + max_tokens (", spec.max_tokens,
                                ") exceeds max_total_tokens ", limits_.max_total_tokens));
  }
  return spec;
}

}  // namespace tpserve::coordinator
