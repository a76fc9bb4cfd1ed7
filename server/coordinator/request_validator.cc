#include "server/coordinator/request_validator.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"

namespace tpserve::coordinator {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

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
  // A text longer than this cannot fit the token limit (a token is at least one byte, and
  // byte-fallback tokenisers never produce fewer tokens than bytes / 64): refuse before
  // spending time encoding it.
  const size_t max_bytes = static_cast<size_t>(limits_.max_input_tokens) * 64 + 4096;
  std::vector<int32_t> out;
  if (!ids.empty()) {
    RETURN_IF_ERROR(CheckIds(ids, "prompt_token_ids"));
    out.assign(ids.begin(), ids.end());
  } else if (!prompt.empty()) {
    if (prompt.size() > max_bytes) {
      return Invalid(absl::StrCat("prompt: ", prompt.size(), " bytes cannot fit max_input_tokens ",
                                  limits_.max_input_tokens));
    }
    ASSIGN_OR_RETURN(out, tokenizer_.Encode(prompt, add_special));
  } else {
    if (chat_ == nullptr) return Invalid("messages: the model has no chat template");
    std::vector<model::ChatMessage> chat;
    size_t bytes = 0;
    for (int i = 0; i < messages.size(); ++i) {
      const std::string& role = messages[i].role();
      if (role != "system" && role != "user" && role != "assistant") {
        return Invalid(absl::StrCat("messages[", i, "].role: '", role.substr(0, 64),
                                    "' is not one of system, user, assistant"));
      }
      bytes += messages[i].content().size();
      chat.push_back({role, messages[i].content()});
    }
    if (bytes > max_bytes) {
      return Invalid(absl::StrCat("messages: ", bytes, " bytes cannot fit max_input_tokens ",
                                  limits_.max_input_tokens));
    }
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

absl::StatusOr<RequestSpec> RequestValidator::Validate(const tpserve::v1::GenerateRequest& r,
                                                       uint64_t random_seed) const {
  RequestSpec spec;
  if (r.request_id().size() > limits_.max_request_id_bytes) {
    return Invalid(absl::StrCat("request_id: ", r.request_id().size(), " bytes exceed the limit ",
                                limits_.max_request_id_bytes));
  }
  spec.request_id = r.request_id();
  if (r.max_tokens() == 0) return Invalid("max_tokens: must be at least 1, got 0");
  if (r.max_tokens() > limits_.max_new_tokens) {
    return Invalid(absl::StrCat("max_tokens: ", r.max_tokens(), " exceeds max_new_tokens ",
                                limits_.max_new_tokens));
  }
  spec.max_tokens = r.max_tokens();

  engine::SamplingParams& p = spec.sampling;
  p.temperature = r.has_temperature() ? r.temperature() : 1.0f;
  if (r.has_top_k()) p.top_k = r.top_k();
  if (r.has_top_p()) p.top_p = r.top_p();
  if (r.has_min_p()) p.min_p = r.min_p();
  if (r.has_repetition_penalty()) p.repetition_penalty = r.repetition_penalty();
  if (r.has_frequency_penalty()) p.frequency_penalty = r.frequency_penalty();
  if (r.has_presence_penalty()) p.presence_penalty = r.presence_penalty();
  if (p.repetition_penalty > limits_.max_repetition_penalty) {
    return Invalid(absl::StrCat("repetition_penalty: must be in (0, ",
                                limits_.max_repetition_penalty, "], got ", p.repetition_penalty));
  }
  RETURN_IF_ERROR(CheckIds(r.stop_token_ids(), "stop_token_ids"));
  p.stop_token_ids.assign(r.stop_token_ids().begin(), r.stop_token_ids().end());
  RETURN_IF_ERROR(engine::ValidateSamplingParams(p, tokenizer_.vocab_size()));
  if (r.logprobs() > limits_.max_logprobs) {
    return Invalid(
        absl::StrCat("logprobs: ", r.logprobs(), " exceeds the limit ", limits_.max_logprobs));
  }
  p.logprobs = r.logprobs();
  p.seed = r.has_seed() ? r.seed() : random_seed;

  if (static_cast<uint32_t>(r.stop_size()) > limits_.max_stop_sequences) {
    return Invalid(absl::StrCat("stop: ", r.stop_size(), " strings exceed max_stop_sequences ",
                                limits_.max_stop_sequences));
  }
  for (int i = 0; i < r.stop_size(); ++i) {
    if (r.stop(i).empty()) return Invalid(absl::StrCat("stop[", i, "]: empty stop string"));
    if (r.stop(i).size() > limits_.max_stop_bytes) {
      return Invalid(absl::StrCat("stop[", i, "]: ", r.stop(i).size(), " bytes exceed the limit ",
                                  limits_.max_stop_bytes));
    }
    spec.stop.push_back(r.stop(i));
  }
  spec.ignore_eos = r.ignore_eos();

  ASSIGN_OR_RETURN(spec.prompt, PromptIds(r.prompt(), r.messages(), r.prompt_token_ids(),
                                          /*add_special=*/true));
  const uint64_t total = spec.prompt.size() + static_cast<uint64_t>(spec.max_tokens);
  if (total > limits_.max_total_tokens) {
    return Invalid(absl::StrCat("max_tokens: prompt (", spec.prompt.size(),
                                " tokens) + max_tokens (", spec.max_tokens,
                                ") exceeds max_total_tokens ", limits_.max_total_tokens));
  }
  return spec;
}

}  // namespace tpserve::coordinator
