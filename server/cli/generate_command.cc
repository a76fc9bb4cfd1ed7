#include "server/cli/generate_command.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/comm/communicator.h"
#include "server/common/status_macros.h"
#include "server/engine/cpu_backend.h"
#include "server/engine/llama_model.h"
#include "server/model/chat_template.h"
#include "server/model/incremental_decoder.h"
#include "server/model/shard_plan.h"
#include "server/model/tokenizer.h"
#include "server/model/weight_source.h"

namespace tpserve::cli {
namespace {

absl::StatusOr<std::vector<int32_t>> PromptIds(const model::Tokenizer& tokenizer,
                                               const GenerateOptions& options) {
  if (!options.chat) return tokenizer.Encode(options.prompt, /*add_special=*/true);
  if (tokenizer.chat_template().empty()) {
    return absl::InvalidArgumentError("--chat: the model has no chat template");
  }
  auto piece = [&](int32_t id) {
    return tokenizer.IsValidId(id) ? std::string(tokenizer.TokenPiece(id)) : std::string();
  };
  ASSIGN_OR_RETURN(auto chat_template, model::ChatTemplate::FromText(tokenizer.chat_template(),
                                                                     piece(tokenizer.bos_id()),
                                                                     piece(tokenizer.eos_id())));
  const model::ChatMessage message{"user", options.prompt};
  ASSIGN_OR_RETURN(std::string text, chat_template->Render({&message, 1}, true));
  // The rendered text carries its special tokens (BOS included) as text.
  return tokenizer.Encode(text, /*add_special=*/false);
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

  ASSIGN_OR_RETURN(model::ShardPlan plan, model::MakeShardPlan(config, 0, 1));
  const int threads = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  engine::CpuBackend backend(threads);
  comm::SingleRankCommunicator comm;
  engine::EngineOptions engine_options;
  engine_options.max_batch_tokens = std::max(1, options.prefill_chunk);
  engine_options.max_logit_rows = 1;
  engine_options.kv_blocks =
      (total + engine_options.kv_block_size - 1) / engine_options.kv_block_size;
  ASSIGN_OR_RETURN(auto model,
                   engine::LlamaModel::Load(*weights, plan, &backend, &comm, engine_options));

  engine::StepSequence seq;
  for (int32_t b = 0; b < model->kv_blocks(); ++b) seq.block_table.push_back(b);
  std::vector<float> logits;
  // Prefill in chunks; only the last chunk asks for logits.
  for (size_t begin = 0; begin < prompt.size(); begin += engine_options.max_batch_tokens) {
    const size_t end = std::min(prompt.size(), begin + engine_options.max_batch_tokens);
    seq.tokens.assign(prompt.begin() + begin, prompt.begin() + end);
    seq.start_pos = static_cast<int32_t>(begin);
    seq.want_logits = end == prompt.size();
    engine::StepBatch batch{{seq}};
    RETURN_IF_ERROR(model->Forward(batch, &logits));
  }

  engine::Sampler sampler;
  model::IncrementalDecoder decoder(*tokenizer, /*skip_special=*/true);
  std::vector<int32_t> generated;
  int finish = 1;  // length
  for (int i = 0; i < options.max_tokens; ++i) {
    const engine::SampleResult r =
        sampler.Sample(logits, options.sampling, {prompt, generated}, static_cast<uint64_t>(i));
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
    seq.tokens = {r.token_id};
    seq.start_pos = static_cast<int32_t>(prompt.size() + generated.size() - 1);
    seq.want_logits = true;
    engine::StepBatch batch{{seq}};
    RETURN_IF_ERROR(model->Forward(batch, &logits));
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
