// CoordinatorServer: everything `tpserve serve` and `tpserve coordinator` run in-process —
// the model's tokenizer and chat template, the worker pool, the batch engine, the public
// Generation service, grpc.health.v1 (SERVING only while the world is ready and not
// draining) and, when asked for, server reflection — on one listening address, plaintext or
// TLS (ServerTls), the Generation service behind API keys when given (grpc.health.v1 stays
// open for probes). Owns them all.
// Thread-safe: Drain and Shutdown may come from a signal-handling thread.
#ifndef TPSERVE_SERVER_COORDINATOR_COORDINATOR_SERVER_H_
#define TPSERVE_SERVER_COORDINATOR_COORDINATOR_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "prometheus/registry.h"
#include "server/common/metrics_server.h"
#include "server/common/server_tls.h"
#include "server/coordinator/api_keys.h"
#include "server/coordinator/batch_engine.h"
#include "server/coordinator/draft_model.h"
#include "server/coordinator/generation_service.h"
#include "server/coordinator/request_validator.h"
#include "server/coordinator/serving_metrics.h"
#include "server/coordinator/step_trace.h"
#include "server/coordinator/worker_pool.h"
#include "server/model/chat/chat_prompt.h"
#include "server/model/tokenizer/tokenizer.h"
#include "server/model/weights/model_config.h"

namespace tpserve::coordinator {

struct CoordinatorOptions {
  std::string model_path;
  // The name GetModelInfo and the OpenAI API's `model` use; empty: the file's general.name,
  // else its file name.
  std::string served_model_name;
  std::string listen = "127.0.0.1:50051";  // HOST:PORT; port 0 picks a free one
  bool reflection = false;                 // grpc.reflection on the public port
  ServerTlsOptions tls;         // TLS (and mutual TLS) of the public port; default plaintext
  std::string api_key_file;     // keys the Generation service asks for; empty: none
  std::string metrics_listen;   // HOST:PORT of the Prometheus endpoint; empty: none
  std::string step_trace_file;  // one JSON line per worker step; empty: none
  ServingLimits limits;
  BatchEngineOptions engine;
  WorkerPoolOptions pool;  // workers, KV budget, threads, timeouts (model_path is filled in)
  // Draft mode (engine.speculative): builds the draft model's world, not started, over the
  // GGUF at `path` (the command line's: the model in this process).
  std::function<absl::StatusOr<std::unique_ptr<StepExecutor>>(const std::string& path)>
      draft_executor;
};

// What another front end of the same engine (the OpenAI HTTP API) serves from: the gRPC
// API's validator, engine, metrics and keys, so that both APIs admit and generate alike.
// The pointers are valid while the CoordinatorServer lives; `api_keys` null: no key.
struct FrontEnd {
  const RequestValidator* validator = nullptr;
  BatchEngine* engine = nullptr;
  ServingMetrics* metrics = nullptr;
  ApiKeys* api_keys = nullptr;
  tpserve::v1::ModelInfo model_info;  // the static fields: name, context length, limits
  std::function<bool()> ready;        // what grpc.health.v1 says: SERVING
};

class CoordinatorServer {
 public:
  // Loads the tokenizer and model config, listens, and starts the engine, which brings the
  // world up in the background (health turns SERVING when it is ready).
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(CoordinatorOptions options);
  ~CoordinatorServer();  // Shutdown()

  int port() const { return port_; }
  FrontEnd front_end();
  // OK while serving; the error that stopped the engine on its own (a model no worker can
  // load) otherwise: the caller should then shut down and exit non-zero.
  absl::Status fatal() const { return engine_->fatal(); }
  // Health NOT_SERVING, new requests UNAVAILABLE; waits (bounded) for the streams in flight
  // to finish. True when they all did.
  bool Drain(absl::Duration timeout);
  // Stops serving: closes the listener and open calls, stops the engine, shuts the workers'
  // sessions down. Idempotent.
  void Shutdown();

 private:
  CoordinatorServer() = default;
  // The steps of Start, in order.
  // The tokenizer and chat template (chat messages are refused without one); the model's
  // configuration, read without loading its weights.
  absl::StatusOr<model::ModelConfig> LoadModel(const std::string& model_path);
  // The Prometheus endpoint (when metrics_listen is set) and the serving metrics.
  absl::Status StartMetrics(const std::string& metrics_listen, int world_size);
  // Draft mode: the draft model, checked against the target's vocabulary and loaded
  // (FAILED_PRECONDITION or InvalidArgument naming --draft_model otherwise); filled into
  // options.engine.
  absl::Status StartDraft(CoordinatorOptions& options);
  // The worker pool, the step trace (when asked for; filled into options.engine) and the batch
  // engine, not started yet.
  absl::Status CreateEngine(CoordinatorOptions& options);
  // The gRPC server on `options.listen` (health NOT_SERVING until the world is ready),
  // refusing request messages over options.limits.max_request_bytes and compressed ones.
  absl::Status Listen(const CoordinatorOptions& options);
  void SetServing(bool serving);

  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<model::ChatPrompt> chat_;
  std::unique_ptr<RequestValidator> validator_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::shared_ptr<prometheus::Registry> registry_;  // metrics_server_'s, or a private one
  std::unique_ptr<ServingMetrics> metrics_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<StepTrace> step_trace_;  // before engine_: the engine writes to it
  std::unique_ptr<DraftModel> draft_;      // draft mode; before engine_, which uses it
  std::unique_ptr<BatchEngine> engine_;
  std::unique_ptr<ApiKeys> api_keys_;  // null: no key asked for
  tpserve::v1::ModelInfo model_info_;  // DescribeModel's
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<bool> serving_{false};  // last health status set
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_COORDINATOR_SERVER_H_
