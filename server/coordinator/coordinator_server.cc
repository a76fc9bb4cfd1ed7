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
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "server/common/status_macros.h"
#include "server/model/weight_source.h"

namespace tpserve::coordinator {
namespace {

// Linking grpc++_reflection registers its plugin with every ServerBuilder (a static
// initialiser); this option takes it out again for --reflection=false.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* args) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                    return p->name() == "proto_server_reflection";
                                  }),
                   plugins->end());
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    CoordinatorOptions options) {
  if (options.pool.workers.empty()) {
    return absl::InvalidArgumentError("coordinator: no workers given");
  }
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  ASSIGN_OR_RETURN(s->tokenizer_, model::Tokenizer::Load(options.model_path));
  ASSIGN_OR_RETURN(std::unique_ptr<model::WeightSource> weights,
                   model::OpenWeightSource(options.model_path));
  const model::ModelConfig config = weights->config();
  weights.reset();
  if (absl::StatusOr<std::unique_ptr<model::ChatPrompt>> chat =
          model::ChatPrompt::Create(*s->tokenizer_);
      chat.ok()) {
    s->chat_ = *std::move(chat);
  } else {
    LOG(WARNING) << "chat messages will be refused: " << chat.status();
  }

  ServingLimits& limits = options.limits;
  if (limits.max_total_tokens > config.context_length) {
    LOG(INFO) << "max_total_tokens " << limits.max_total_tokens
              << " capped at the model's context length " << config.context_length;
    limits.max_total_tokens = static_cast<uint32_t>(config.context_length);
  }
  limits.max_input_tokens = std::min(limits.max_input_tokens, limits.max_total_tokens - 1);
  limits.max_new_tokens = std::min(limits.max_new_tokens, limits.max_total_tokens - 1);
  options.engine.max_queue = limits.max_queue;
  s->validator_ = std::make_unique<RequestValidator>(*s->tokenizer_, s->chat_.get(), limits);

  options.pool.model_path = options.model_path;
  const int world = static_cast<int>(options.pool.workers.size());
  if (!options.metrics_listen.empty()) {
    ASSIGN_OR_RETURN(s->metrics_server_, MetricsServer::Start(options.metrics_listen));
    s->registry_ = s->metrics_server_->shared_registry();
  } else {
    s->registry_ = std::make_shared<prometheus::Registry>();
  }
  s->metrics_ = std::make_unique<ServingMetrics>(*s->registry_, world);
  s->pool_ = std::make_unique<WorkerPool>(options.pool);
  if (!options.step_trace_file.empty()) {
    ASSIGN_OR_RETURN(s->step_trace_, StepTrace::Open(options.step_trace_file));
    options.engine.step_trace = s->step_trace_.get();
  }
  CoordinatorServer* self = s.get();
  s->engine_ = std::make_unique<BatchEngine>(options.engine, s->pool_.get(), *s->tokenizer_,
                                             s->metrics_.get(),
                                             [self](bool ready) { self->SetServing(ready); });

  tpserve::v1::ModelInfo info;
  info.set_model_name(config.name.empty()
                          ? std::filesystem::path(options.model_path).filename().string()
                          : config.name);
  info.set_architecture(config.architecture);
  info.set_context_length(static_cast<uint32_t>(config.context_length));
  info.set_vocab_size(static_cast<uint32_t>(s->tokenizer_->vocab_size()));
  info.set_world_size(static_cast<uint32_t>(world));
  // What was asked for ("auto", "shm", "gloo", "nccl") until the world says what it built.
  info.set_backend(absl::AsciiStrToLower(
      absl::StripPrefix(tpserve::v1::CommBackend_Name(options.pool.backend), "COMM_BACKEND_")));
  info.set_max_input_tokens(limits.max_input_tokens);
  info.set_max_total_tokens(limits.max_total_tokens);
  info.set_max_new_tokens(limits.max_new_tokens);
  info.set_max_queue(limits.max_queue);
  info.set_max_stop_sequences(limits.max_stop_sequences);
  info.set_kv_block_size(options.pool.kv_block_size);
  info.set_eos_token_id(s->tokenizer_->eos_id());
  info.set_bos_token_id(s->tokenizer_->bos_id());
  s->service_ = std::make_unique<GenerationService>(
      *s->tokenizer_, *s->validator_, s->engine_.get(), s->metrics_.get(), std::move(info));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!options.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &s->port_);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("coordinator: cannot listen on ", options.listen));
  }
  s->server_->GetHealthCheckService()->SetServingStatus(false);
  s->engine_->Start();
  return s;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

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
