// GenerationService: the public tpserve.v1.Generation service on the gRPC callback API.
// Generate, Tokenize and Detokenize take their requests as raw bytes so that their sizes are
// checked before anything is parsed (RequestValidator::CheckWire) and invalid UTF-8 becomes
// INVALID_ARGUMENT naming the field (protobuf would refuse to parse it); everything else is
// validated by RequestValidator and queued on the BatchEngine. With ApiKeys, every call must
// carry "authorization: Bearer KEY" metadata first (UNAUTHENTICATED otherwise). Holds no
// request state of its own; thread-safe.
#ifndef TPSERVE_SERVER_COORDINATOR_GENERATION_SERVICE_H_
#define TPSERVE_SERVER_COORDINATOR_GENERATION_SERVICE_H_

#include <cstdint>

#include "grpcpp/grpcpp.h"
#include "server/coordinator/api_keys.h"
#include "server/coordinator/batch_engine.h"
#include "server/coordinator/generate_stream.h"
#include "server/coordinator/request_validator.h"
#include "server/coordinator/serving_metrics.h"
#include "server/model/tokenizer/tokenizer.h"
#include "tpserve/v1/generate.grpc.pb.h"

namespace tpserve::coordinator {

using GenerationBase = tpserve::v1::Generation::WithRawCallbackMethod_Generate<
    tpserve::v1::Generation::WithRawCallbackMethod_Tokenize<
        tpserve::v1::Generation::WithRawCallbackMethod_Detokenize<
            tpserve::v1::Generation::WithCallbackMethod_GetModelInfo<
                tpserve::v1::Generation::Service>>>>;

class GenerationService final : public GenerationBase {
 public:
  // `model_info` holds the static fields (name, architecture, limits, world); the dynamic
  // ones come from `engine`. `api_keys` null: no key asked for. Every argument must outlive
  // the service.
  GenerationService(const model::Tokenizer& tokenizer, const RequestValidator& validator,
                    BatchEngine* engine, ServingMetrics* metrics, tpserve::v1::ModelInfo model_info,
                    ApiKeys* api_keys = nullptr);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const tpserve::v1::GetModelInfoRequest* request,
                                         tpserve::v1::ModelInfo* response) override;

 private:
  // OK when no key is asked for or the call's authorization metadata holds a current key.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const;
  // Parses, validates and queues a Generate request delivering into `stream`.
  absl::Status Submit(const grpc::ByteBuffer& request, GenerateStream* stream);
  absl::Status DoTokenize(const grpc::ByteBuffer& request, grpc::ByteBuffer* response) const;
  absl::Status DoDetokenize(const grpc::ByteBuffer& request, grpc::ByteBuffer* response) const;

  const model::Tokenizer& tokenizer_;
  const RequestValidator& validator_;
  BatchEngine* const engine_;
  ServingMetrics* const metrics_;
  const tpserve::v1::ModelInfo model_info_;
  ApiKeys* const api_keys_;
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_GENERATION_SERVICE_H_
