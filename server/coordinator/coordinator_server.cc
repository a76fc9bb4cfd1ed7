#include "server/coordinator/coordinator_server.h"

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/common/server_hardening.h"
#include "server/common/status_macros.h"
#include "server/model/plan/shard_plan.h"
#include "server/model/weights/weight_source.h"

namespace tpserve::coordinator {
namespace {

// The limits capped by the model: prompt + output within its context length, and a prompt or
// an output at most that less one token.
ServingLimits CapLimits(ServingLimits limits, const model::ModelConfig& config) {
  if (limits.max_total_tokens > config.context_length) {
    LOG(INFO) << "max_total_tokens " << limits.max_total_tokens
              << " capped at the model's context length " << config.context_length;
    limits.max_total_tokens = static_cast<uint32_t>(config.context_length);
  }
  limits.max_input_tokens = std::min(limits.max_input_tokens, limits.max_total_tokens - 1);
  limits.max_new_tokens = std::min(limits.max_new_tokens, limits.max_total_tokens - 1);
  return limits;
}

// What GetModelInfo answers before the world is up: the model, the world asked for, the limits.
tpserve::v1::ModelInfo DescribeModel(const CoordinatorOptions& options,
                                     const model::ModelConfig& config,
                                     const model::Tokenizer& tokenizer) {
  const ServingLimits& limits = options.limits;
  tpserve::v1::ModelInfo info;
  if (!options.served_model_name.empty()) {
    info.set_model_name(options.served_model_name);
  } else {
    info.set_model_name(config.name.empty()
                            ? std::filesystem::path(options.model_path).filename().string()
                            : config.name);
  }
  info.set_architecture(config.architecture);
  info.set_context_length(static_cast<uint32_t>(config.context_length));
  info.set_vocab_size(static_cast<uint32_t>(tokenizer.vocab_size()));
  info.set_world_size(static_cast<uint32_t>(options.pool.workers.size()));
  // What was asked for ("auto", "shm", "gloo", "nccl") until the world says what it built.
  info.set_backend(absl::AsciiStrToLower(
      absl::StripPrefix(tpserve::v1::CommBackend_Name(options.pool.backend), "COMM_BACKEND_")));
  info.set_max_input_tokens(limits.max_input_tokens);
  info.set_max_total_tokens(limits.max_total_tokens);
  info.set_max_new_tokens(limits.max_new_tokens);
  info.set_max_queue(limits.max_queue);
  info.set_max_stop_sequences(limits.max_stop_sequences);
  info.set_kv_block_size(options.pool.kv_block_size);
  info.set_eos_token_id(tokenizer.eos_id());
  info.set_bos_token_id(tokenizer.bos_id());
  info.set_prefix_caching(options.engine.prefix_caching);
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    CoordinatorOptions options) {
  if (options.pool.workers.empty()) {
    return absl::InvalidArgumentError("coordinator: no workers given");
  }
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  // The security flags first: a mistake there is reported before anything slow starts.
  RETURN_IF_ERROR(CheckServerTls(options.tls));
  if (!options.api_key_file.empty()) {
    ASSIGN_OR_RETURN(s->api_keys_, ApiKeys::Load(options.api_key_file));
  }
  RETURN_IF_ERROR(CheckMinWorldSize(options.pool.min_world_size,
                                    static_cast<int>(options.pool.workers.size())));
  ASSIGN_OR_RETURN(const model::ModelConfig config, s->LoadModel(options.model_path));
  // An elastic world's sizes must split the model as the workers will split it.
  options.pool.can_split = [config](int world) {
    return model::MakeShardPlan(config, 0, world).status();
  };
  options.limits = CapLimits(options.limits, config);
  options.engine.max_queue = options.limits.max_queue;
  s->validator_ =
      std::make_unique<RequestValidator>(*s->tokenizer_, s->chat_.get(), options.limits);
  options.pool.model_path = options.model_path;
  options.pool.vocab_size = static_cast<int32_t>(config.vocab_size);
  RETURN_IF_ERROR(
      s->StartMetrics(options.metrics_listen, static_cast<int>(options.pool.workers.size())));
  if (options.engine.speculative.mode == SpeculativeMode::kDraft) {
    RETURN_IF_ERROR(s->StartDraft(options));
  }
  RETURN_IF_ERROR(s->CreateEngine(options));
  s->model_info_ = DescribeModel(options, config, *s->tokenizer_);
  s->service_ =
      std::make_unique<GenerationService>(*s->tokenizer_, *s->validator_, s->engine_.get(),
                                          s->metrics_.get(), s->model_info_, s->api_keys_.get());
  RETURN_IF_ERROR(s->Listen(options));
  s->engine_->Start();
  return s;
}

absl::StatusOr<model::ModelConfig> CoordinatorServer::LoadModel(const std::string& model_path) {
  ASSIGN_OR_RETURN(tokenizer_, model::Tokenizer::Load(model_path));
  ASSIGN_OR_RETURN(std::unique_ptr<model::WeightSource> weights,
                   model::OpenWeightSource(model_path));
  model::ModelConfig config = weights->config();
  weights.reset();
  if (absl::StatusOr<std::unique_ptr<model::ChatPrompt>> chat =
          model::ChatPrompt::Create(*tokenizer_);
      chat.ok()) {
    chat_ = *std::move(chat);
  } else {
    LOG(WARNING) << "chat messages will be refused: " << chat.status();
  }
  return config;
}

absl::Status CoordinatorServer::StartMetrics(const std::string& metrics_listen, int world_size) {
  if (!metrics_listen.empty()) {
    ASSIGN_OR_RETURN(metrics_server_, MetricsServer::Start(metrics_listen));
    registry_ = metrics_server_->shared_registry();
  } else {
    registry_ = std::make_shared<prometheus::Registry>();
  }
  metrics_ = std::make_unique<ServingMetrics>(*registry_, world_size);
  return absl::OkStatus();
}

absl::Status CoordinatorServer::StartDraft(CoordinatorOptions& options) {
  const std::string& path = options.engine.speculative.draft_model;
  auto refused = [&](const absl::Status& why) {
    return absl::FailedPreconditionError(absl::StrCat("--draft_model ", path, ": ", why.message()));
  };
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer = model::Tokenizer::Load(path);
  if (!tokenizer.ok()) return refused(tokenizer.status());
  RETURN_IF_ERROR(CheckSameVocabulary(*tokenizer_, **tokenizer));
  absl::StatusOr<std::unique_ptr<model::WeightSource>> weights = model::OpenWeightSource(path);
  if (!weights.ok()) return refused(weights.status());
  const DraftModelOptions draft{.max_batch_tokens = options.engine.scheduler.max_batch_tokens,
                                .max_positions = (*weights)->config().context_length};
  weights->reset();
  if (!options.draft_executor) return refused(absl::UnimplementedError("no draft world here"));
  absl::StatusOr<std::unique_ptr<StepExecutor>> executor = options.draft_executor(path);
  if (!executor.ok()) return refused(executor.status());
  draft_ = std::make_unique<DraftModel>(*std::move(executor), draft);
  if (absl::Status started = draft_->Start(); !started.ok()) return refused(started);
  LOG(INFO) << "speculative decoding: draft model " << path << " up, " << draft_->total_blocks()
            << " KV blocks";
  options.engine.draft = draft_.get();
  return absl::OkStatus();
}

absl::Status CoordinatorServer::CreateEngine(CoordinatorOptions& options) {
  pool_ = std::make_unique<WorkerPool>(options.pool);
  if (!options.step_trace_file.empty()) {
    ASSIGN_OR_RETURN(step_trace_, StepTrace::Open(options.step_trace_file));
    options.engine.step_trace = step_trace_.get();
  }
  engine_ = std::make_unique<BatchEngine>(options.engine, pool_.get(), *tokenizer_, metrics_.get(),
                                          [this](bool ready) { SetServing(ready); });
  return absl::OkStatus();
}

absl::Status CoordinatorServer::Listen(const CoordinatorOptions& options) {
  const std::string& listen = options.listen;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   MakeServerCredentials(options.tls));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Bounds every request message before the service sees it: RESOURCE_EXHAUSTED above this.
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.limits.max_request_bytes));
  // Compressed requests are refused (that limit is checked only after inflating them).
  HardenServerBuilder(&builder, options.reflection);
  builder.AddListeningPort(listen, credentials, &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("coordinator: cannot listen on ", listen));
  }
  server_->GetHealthCheckService()->SetServingStatus(false);
  return absl::OkStatus();
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

FrontEnd CoordinatorServer::front_end() {
  return {.validator = validator_.get(),
          .engine = engine_.get(),
          .metrics = metrics_.get(),
          .api_keys = api_keys_.get(),
          .model_info = model_info_,
          .ready = [this] { return serving_.load(); }};
}

void CoordinatorServer::SetServing(bool serving) {
  if (server_ == nullptr) return;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(serving);
  }
  if (serving_.exchange(serving) != serving) {
    LOG(INFO) << "health: " << (serving ? "SERVING" : "NOT_SERVING");
  }
}

bool CoordinatorServer::Drain(absl::Duration timeout) {
  if (engine_ == nullptr) return true;
  engine_->Drain();
  SetServing(false);
  return engine_->AwaitIdle(timeout);
}

void CoordinatorServer::Shutdown() {
  if (server_ != nullptr) {
    SetServing(false);
    if (engine_ != nullptr) engine_->Drain();
    // Open calls get a grace period, then are cancelled; the engine closes their sinks.
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
  if (engine_ != nullptr) engine_->Stop();
  if (server_ != nullptr) {
    server_->Wait();
    server_.reset();
  }
  if (pool_ != nullptr) pool_->Shutdown("coordinator shutting down");
}

}  // namespace tpserve::coordinator
