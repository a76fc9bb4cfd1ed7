#include "server/cli/generate_command.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/kv_block.h"
#include "server/cli/in_process_executor.h"
#include "server/cli/stream_printer.h"
#include "server/common/status_macros.h"
#include "server/coordinator/batch_engine.h"
#include "server/coordinator/request_validator.h"
#include "server/coordinator/serving_metrics.h"
#include "server/coordinator/worker_pool.h"
#include "server/model/chat/chat_prompt.h"
#include "server/model/tokenizer/tokenizer.h"
#include "server/model/weights/weight_source.h"
#include "server/protocol/step_codec.h"

namespace tpserve::cli {
namespace {

// What the gRPC service would receive for these options. With --json the chosen token's
// logprob is always shown, so at least one logprob is asked for.
tpserve::v1::GenerateRequest BuildRequest(const GenerateOptions& options) {
  tpserve::v1::GenerateRequest r = options.sampling;
  if (options.chat) {
    tpserve::v1::ChatMessage* message = r.add_messages();
    message->set_role("user");
    message->set_content(options.prompt);
  } else {
    r.set_prompt(options.prompt);
  }
  r.set_max_tokens(static_cast<uint32_t>(std::max(0, options.max_tokens)));
  if (options.json) r.set_logprobs(std::max(1u, r.logprobs()));
  r.set_ignore_eos(options.ignore_eos);
  return r;
}

// The server's limits on a request, except that one run may use the model's whole context.
coordinator::ServingLimits GenerateLimits(const model::ModelConfig& config) {
  coordinator::ServingLimits limits;
  limits.max_input_tokens = static_cast<uint32_t>(config.context_length);
  limits.max_new_tokens = std::numeric_limits<uint32_t>::max();  // context checked below
  limits.max_total_tokens = std::numeric_limits<uint32_t>::max();
  limits.max_logprobs = protocol::kMaxLogprobs;
  return limits;
}

// The request in the engine's terms, through the server's own validation.
absl::StatusOr<coordinator::RequestSpec> MakeSpec(const GenerateOptions& options,
                                                  const model::Tokenizer& tokenizer,
                                                  const model::ModelConfig& config) {
  std::unique_ptr<model::ChatPrompt> chat;
  if (options.chat) {
    absl::StatusOr<std::unique_ptr<model::ChatPrompt>> made = model::ChatPrompt::Create(tokenizer);
    if (!made.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--chat: ", made.status().message()));
    }
    chat = *std::move(made);
  }
  const coordinator::RequestValidator validator(tokenizer, chat.get(), GenerateLimits(config));
  ASSIGN_OR_RETURN(coordinator::RequestSpec spec, validator.Validate(BuildRequest(options)));
  const int64_t total = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens;
  if (total > config.context_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", spec.prompt.size(), " tokens) + max_tokens (", spec.max_tokens,
                     ") exceeds the model's context length ", config.context_length));
  }
  return spec;
}

// The world the steps run on: the model in this process, its KV cache sized for `total`
// positions, or the workers.
absl::StatusOr<std::unique_ptr<coordinator::StepExecutor>> MakeExecutor(
    const GenerateOptions& options, const model::WeightSource& weights, int64_t total) {
  if (options.workers.empty()) {
    InProcessOptions local;
    local.kv_blocks = (total + kKvBlockSize - 1) / kKvBlockSize;
    local.max_batch_tokens = std::max(1, options.prefill_chunk);
    local.max_sequences = 1;
    local.threads = options.threads > 0
                        ? options.threads
                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    local.dequantize = options.dequantize;
    local.tp_invariant = options.tp_invariant;
    local.device = options.device;
    return std::make_unique<InProcessExecutor>(weights, local);
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
  pool.float_row_sums = !options.tp_invariant;
  pool.backend = options.comm;
  return std::make_unique<coordinator::WorkerPool>(std::move(pool));
}

}  // namespace

absl::Status RunGenerate(const GenerateOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(auto tokenizer, model::Tokenizer::Load(options.model_path));
  ASSIGN_OR_RETURN(auto weights, model::OpenWeightSource(options.model_path));
  ASSIGN_OR_RETURN(coordinator::RequestSpec spec, MakeSpec(options, *tokenizer, weights->config()));
  ASSIGN_OR_RETURN(
      const std::unique_ptr<coordinator::StepExecutor> executor,
      MakeExecutor(options, *weights, static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens));

  // One request through the server's token loop: prefill in chunks of prefill_chunk, then one
  // token a step; a world that fails ends the run with its error.
  coordinator::BatchEngineOptions engine_options;
  engine_options.scheduler.max_batch_tokens = std::max(1, options.prefill_chunk);
  engine_options.scheduler.max_running = 1;
  engine_options.max_queue = 1;
  engine_options.restart_world = false;
  prometheus::Registry registry;  // the engine's metrics, not exposed
  coordinator::ServingMetrics metrics(registry,
                                      std::max(1, static_cast<int>(options.workers.size())));
  coordinator::BatchEngine engine(engine_options, executor.get(), *tokenizer, &metrics, nullptr);
  engine.Start();
  RETURN_IF_ERROR(engine.AwaitReady(absl::InfiniteDuration()));
  auto printer = std::make_shared<StreamPrinter>(out, options.json, options.sampling.logprobs());
  RETURN_IF_ERROR(engine.Submit(std::move(spec), printer));
  absl::Status status = printer->Wait();
  engine.Stop();
  return status;
}

}  // namespace tpserve::cli
