// RequestValidator: checks a public GenerateRequest against the model and the server's
// limits and turns it into a RequestSpec — prompt token ids and sampling parameters — before
// anything reaches the scheduler or a worker. Every refusal is INVALID_ARGUMENT naming the
// field and, where there is one, the limit. Immutable after construction; thread-safe.
#ifndef TPSERVE_SERVER_COORDINATOR_REQUEST_VALIDATOR_H_
#define TPSERVE_SERVER_COORDINATOR_REQUEST_VALIDATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/repeated_field.h"
#include "server/engine/sampler.h"
#include "server/grammar/compiled_grammar.h"
#include "server/model/chat/chat_prompt.h"
#include "server/model/tokenizer/tokenizer.h"
#include "tpserve/v1/generate.pb.h"

namespace tpserve::coordinator {

// The server's limits (the first five are flags of `tpserve serve` / `tpserve coordinator`).
// Those on sizes bound what a request costs before it is parsed, rendered or tokenised.
struct ServingLimits {
  uint32_t max_input_tokens = 1024;     // prompt tokens
  uint32_t max_total_tokens = 2048;     // prompt + max_tokens (also capped by context and KV)
  uint32_t max_new_tokens = 1024;       // max_tokens
  uint32_t max_queue = 256;             // waiting requests
  uint32_t max_stop_sequences = 4;      // stop strings per request
  uint32_t max_stop_bytes = 256;        // bytes per stop string
  uint32_t max_stop_token_ids = 128;    // stop_token_ids per request
  uint32_t max_logprobs = 20;           // GenerateRequest.logprobs
  uint32_t max_request_id_bytes = 256;  // printable ASCII only
  uint32_t max_messages = 1024;         // chat messages per request
  // Bytes of the prompt text, or of all messages' content together; the bound actually
  // applied is also at most 64 * max_input_tokens + 4 KiB, which no tokeniser fits in
  // max_input_tokens (see PromptByteLimit).
  uint32_t max_prompt_bytes = 1 << 20;
  // A whole serialised request (gRPC's max receive message size; compressed requests are
  // refused outright): what the server buffers before any of the limits above are checked.
  uint32_t max_request_bytes = 4 << 20;
};

// What a request asks the server to hold and look at: counts and byte sizes, measured from
// a parsed request or from its wire form before parsing (RequestValidator::CheckWire).
struct RequestSize {
  uint64_t prompt_bytes = 0;      // GenerateRequest.prompt / TokenizeRequest.text
  uint64_t messages = 0;          // messages entries
  uint64_t message_bytes = 0;     // messages[].content bytes, all together
  uint64_t prompt_token_ids = 0;  // prompt_token_ids entries
  uint64_t stop = 0;              // stop strings
  uint64_t stop_token_ids = 0;    // stop_token_ids entries
  uint64_t request_id_bytes = 0;
  uint64_t token_ids = 0;         // DetokenizeRequest.token_ids entries
  uint64_t resume_token_ids = 0;  // GenerateRequest.resume.token_ids entries
};

// A validated request in the engine's terms.
struct RequestSpec {
  std::string request_id;           // empty: BatchEngine::Submit names it "req-N"
  std::vector<int32_t> prompt;      // [prompt_tokens] ids in the vocabulary, non-empty
  int64_t max_tokens = 0;           // >= 1; prompt + max_tokens within the limits
  engine::SamplingParams sampling;  // ranges checked; its seed is set by BatchEngine::Submit
  std::optional<uint64_t> seed;     // the request's seed; none: Submit draws one
  // Tokens the client already received (GenerateRequest.resume): output, not prompt; fewer
  // than max_tokens, none of them ending the stream.
  std::vector<int32_t> resumed;
  std::vector<std::string> stop;  // non-empty strings
  bool ignore_eos = false;
  std::string api = "grpc";  // the front end it came through ("grpc", "http"): a metrics label
  // GenerateRequest.structured_output, compiled; null for free text.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
};

// What a GenerateRequest with max_tokens 0 means: an error (the gRPC API), or as many tokens
// as the limits leave after the prompt (OpenAI's chat completions, as vLLM serves them).
enum class MaxTokensUnset { kRefuse, kRestOfContext };

class RequestValidator {
 public:
  // `chat` may be null (a model without a chat template: `messages` is then refused).
  // Both must outlive the validator. `limits.max_total_tokens` should already be capped at
  // the model's context and the KV capacity.
  RequestValidator(const model::Tokenizer& tokenizer, const model::ChatPrompt* chat,
                   ServingLimits limits)
      : tokenizer_(tokenizer), chat_(chat), limits_(limits) {}

  // Refuses a serialised GenerateRequest, TokenizeRequest or DetokenizeRequest (`type`) whose
  // sizes exceed the limits, before it is parsed: the same rule as Validate's, on what the
  // wire holds.
  absl::Status CheckWire(const google::protobuf::Descriptor& type, std::string_view wire) const;

  // The size rule: every count and byte size of `size` within the limits, else
  // InvalidArgument naming the field and the limit.
  absl::Status CheckSize(const RequestSize& size) const;

  // The request in the engine's terms; the engine's admission assigns its seed and id when
  // it has none. With kRestOfContext, max_tokens 0 becomes min(max_new_tokens,
  // max_total_tokens - prompt tokens), and a prompt that leaves no room is refused.
  absl::StatusOr<RequestSpec> Validate(const tpserve::v1::GenerateRequest& request,
                                       MaxTokensUnset unset = MaxTokensUnset::kRefuse) const;

  // The prompt ids of exactly one of text / messages / token ids (the fields' names as in
  // GenerateRequest), checked against max_input_tokens. Shared with Tokenize.
  absl::StatusOr<std::vector<int32_t>> PromptIds(
      const std::string& prompt,
      const google::protobuf::RepeatedPtrField<tpserve::v1::ChatMessage>& messages,
      const google::protobuf::RepeatedField<int32_t>& ids, bool add_special) const;

  const ServingLimits& limits() const { return limits_; }
  // Bytes of prompt text (or of all messages' content) allowed: max_prompt_bytes, at most
  // 64 bytes per input token + 4 KiB (no tokeniser makes fewer tokens than bytes / 64).
  uint64_t PromptByteLimit() const;

 private:
  absl::Status CheckIds(const google::protobuf::RepeatedField<int32_t>& ids,
                        const char* field) const;
  // GenerateRequest.resume into `spec` (after its sampling, stop ids, max_tokens and
  // grammar: resumed tokens must keep to the grammar).
  absl::Status ValidateResume(const tpserve::v1::GenerateRequest& r, RequestSpec* spec) const;
  // GenerateRequest.structured_output, compiled (through the grammar cache); null if unset.
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> Grammar(
      const tpserve::v1::StructuredOutput& output) const;

  const model::Tokenizer& tokenizer_;
  const model::ChatPrompt* chat_;
  const ServingLimits limits_;
  // Built on the first structured-output request (the vocabulary's trie takes a moment).
  mutable absl::once_flag grammars_once_;
  mutable std::unique_ptr<grammar::GrammarCache> grammars_;
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_REQUEST_VALIDATOR_H_
