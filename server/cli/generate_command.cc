#include "server/cli/generate_command.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/kv_block.h"
#include "nlohmann/json.hpp"
#include "server/cli/local_step_runner.h"
#include "server/cli/remote_step_runner.h"
#include "server/cli/step_runner.h"
#include "server/common/status_macros.h"
#include "server/model/chat_prompt.h"
#include "server/model/incremental_decoder.h"
#include "server/model/tokenizer.h"
#include "server/model/weight_source.h"

namespace tpserve::cli {
namespace {

absl::StatusOr<std::vector<int32_t>> PromptIds(const model::Tokenizer& tokenizer,
                                               const GenerateOptions& options) {
  if (!options.chat) return tokenizer.Encode(options.prompt, /*add_special=*/true);
  absl::StatusOr<std::unique_ptr<model::ChatPrompt>> chat = model::ChatPrompt::Create(tokenizer);
  if (!chat.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--chat: ", chat.status().message()));
  }
  const model::ChatMessage message{"user", options.prompt};
  return (*chat)->Encode({&message, 1});
}

const char* FinishReasonName(int reason) {
  switch (reason) {
    case 1:
      return "length";
    case 2:
      return "stop";
    default:
      return "eos";
  }
}

absl::StatusOr<std::unique_ptr<StepRunner>> MakeRunner(const GenerateOptions& options,
                                                       const model::WeightSource& weights,
                                                       int64_t total) {
  if (options.workers.empty()) {
    const int threads = options.threads > 0
                            ? options.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return LocalStepRunner::Create(weights, total, options.prefill_chunk, threads,
                                   options.dequantize);
  }
  coordinator::WorkerPoolOptions pool;
  pool.workers = options.workers;
  ASSIGN_OR_RETURN(pool.credentials, MakeClusterChannelCredentials(options.cluster_tls));
  pool.model_path = options.model_path;
  pool.vocab_size = static_cast<int32_t>(weights.config().vocab_size);
  pool.kv_budget_bytes = options.kv_budget_bytes;
  pool.kv_block_size = kKvBlockSize;
  pool.threads = static_cast<uint32_t>(std::max(0, options.threads));
  pool.dequantize = options.dequantize;
  pool.backend = options.comm;
  return RemoteStepRunner::Create(std::move(pool));
}

}  // namespace

absl::Status RunGenerate(const GenerateOptions& options, std::ostream& out) {
  if (options.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_tokens must be >= 1, got ", options.max_tokens));
  }
  ASSIGN_OR_RETURN(auto tokenizer, model::Tokenizer::Load(options.model_path));
  ASSIGN_OR_RETURN(auto weights, model::OpenWeightSource(options.model_path));
  const model::ModelConfig& config = weights->config();
  RETURN_IF_ERROR(
      engine::ValidateSamplingParams(options.sampling, static_cast<int32_t>(config.vocab_size)));
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptIds(*tokenizer, options));
  if (prompt.empty()) return absl::InvalidArgumentError("--prompt: the prompt has no tokens");
  const int64_t total = static_cast<int64_t>(prompt.size()) + options.max_tokens;
  if (total > config.context_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", prompt.size(), " tokens) + max_tokens (", options.max_tokens,
                     ") exceeds the model's context length ", config.context_length));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<StepRunner> runner, MakeRunner(options, *weights, total));
  const int64_t blocks = (total + kKvBlockSize - 1) / kKvBlockSize;
  if (blocks > runner->kv_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the sequence needs ", blocks, " KV blocks, the world has ", runner->kv_blocks()));
  }

  SequenceStep step;
  for (int32_t b = 0; b < blocks; ++b) step.block_table.push_back(b);
  std::vector<int32_t> generated;
  std::optional<engine::SampleResult> sampled;
  // Prefill in chunks; only the last chunk samples.
  const size_t chunk = static_cast<size_t>(std::max(1, options.prefill_chunk));
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t end = std::min(prompt.size(), begin + chunk);
    step.tokens.assign(prompt.begin() + begin, prompt.begin() + end);
    step.start_pos = static_cast<int32_t>(begin);
    step.sample = end == prompt.size();
    step.sample_index = 0;
    ASSIGN_OR_RETURN(sampled, runner->Run(step, options.sampling, {prompt, generated}));
  }

  model::IncrementalDecoder decoder(*tokenizer, /*skip_special=*/true);
  int finish = 1;  // length
  for (int i = 0; i < options.max_tokens; ++i) {
    const engine::SampleResult& r = *sampled;
    generated.push_back(r.token_id);
    const bool eos = !options.ignore_eos && r.token_id == tokenizer->eos_id();
    ASSIGN_OR_RETURN(std::string text, decoder.Feed(r.token_id));
    if (options.json) {
      nlohmann::json j = {{"id", r.token_id}, {"text", text}, {"logprob", r.logprob}};
      if (!r.top.empty()) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& t : r.top) top.push_back({{"id", t.token_id}, {"logprob", t.logprob}});
        j["top"] = top;
      }
      out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      out << text;
    }
    out.flush();
    if (eos || r.is_stop) {
      finish = eos ? 3 : 2;
      break;
    }
    if (i + 1 == options.max_tokens) break;
    step.tokens = {r.token_id};
    step.start_pos = static_cast<int32_t>(prompt.size() + generated.size() - 1);
    step.sample = true;
    step.sample_index = static_cast<uint64_t>(i) + 1;
    ASSIGN_OR_RETURN(sampled, runner->Run(step, options.sampling, {prompt, generated}));
  }
  const std::string rest = decoder.Flush();
  if (options.json) {
    nlohmann::json summary = {{"finish_reason", FinishReasonName(finish)},
                              {"token_ids", generated},
                              {"prompt_tokens", prompt.size()},
                              {"completion_tokens", generated.size()}};
    if (!rest.empty()) summary["text"] = rest;
    out << summary.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    out << rest << "\n";
  }
  out.flush();
  return absl::OkStatus();
}

}  // namespace tpserve::cli
