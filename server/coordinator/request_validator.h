// RequestValidator: checks a public GenerateRequest against the model and the server's
// limits and turns it into a RequestSpec — prompt token ids and sampling parameters — before
// anything reaches the scheduler or a worker. Every refusal is INVALID_ARGUMENT naming the
// field and, where there is one, the limit. Immutable after construction; thread-safe.
#ifndef TPSERVE_SERVER_COORDINATOR_REQUEST_VALIDATOR_H_
#define TPSERVE_SERVER_COORDINATOR_REQUEST_VALIDATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/repeated_field.h"
#include "server/engine/sampler.h"
#include "server/model/chat_prompt.h"
#include "server/model/tokenizer.h"
#include "tpserve/v1/generate.pb.h"

namespace tpserve::coordinator {

// The server's limits (flags of `tpserve serve` / `tpserve coordinator`).
struct ServingLimits {
  uint32_t max_input_tokens = 1024;  // prompt tokens
  uint32_t max_total_tokens = 2048;  // prompt + max_tokens (also capped by context and KV)
  uint32_t max_new_tokens = 1024;    // max_tokens
  uint32_t max_queue = 256;          // waiting requests
  uint32_t max_stop_sequences = 4;   // stop strings per request
  uint32_t max_stop_bytes = 256;     // bytes per stop string
  uint32_t max_logprobs = 20;        // GenerateRequest.logprobs
  uint32_t max_request_id_bytes = 256;
  float max_repetition_penalty = 10;  // (0, this]
};

// A validated request in the engine's terms.
struct RequestSpec {
  std::string request_id;
  std::vector<int32_t> prompt;      // [prompt_tokens] ids in the vocabulary, non-empty
  int64_t max_tokens = 0;           // >= 1; prompt + max_tokens within the limits
  engine::SamplingParams sampling;  // ranges checked; seed drawn when the request had none
  std::vector<std::string> stop;    // non-empty strings
  bool ignore_eos = false;
};

class RequestValidator {
 public:
  // `chat` may be null (a model without a chat template: `messages` is then refused).
  // Both must outlive the validator. `limits.max_total_tokens` should already be capped at
  // the model's context and the KV capacity.
  RequestValidator(const model::Tokenizer& tokenizer, const model::ChatPrompt* chat,
                   ServingLimits limits)
      : tokenizer_(tokenizer), chat_(chat), limits_(limits) {}

  // `random_seed` is used when the request sets no seed.
  absl::StatusOr<RequestSpec> Validate(const tpserve::v1::GenerateRequest& request,
                                       uint64_t random_seed) const;

  // The prompt ids of exactly one of text / messages / token ids (the fields' names as in
  // GenerateRequest), checked against max_input_tokens. Shared with Tokenize.
  absl::StatusOr<std::vector<int32_t>> PromptIds(
      const std::string& prompt,
      const google::protobuf::RepeatedPtrField<tpserve::v1::ChatMessage>& messages,
      const google::protobuf::RepeatedField<int32_t>& ids, bool add_special) const;

  const ServingLimits& limits() const { return limits_; }

 private:
  absl::Status CheckIds(const google::protobuf::RepeatedField<int32_t>& ids,
                        const char* field) const;

  const model::Tokenizer& tokenizer_;
  const model::ChatPrompt* chat_;
  const ServingLimits limits_;
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_REQUEST_VALIDATOR_H_
