#include "server/coordinator/generation_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/common/grpc_status.h"
#include "server/common/proto_utf8.h"
#include "server/common/status_macros.h"
#include "server/coordinator/generate_stream.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::coordinator {
namespace {

// Parses a raw request: refuses one whose sizes exceed the limits before anything is built
// from it (500,000 empty chat messages cost no allocation each), then invalid UTF-8 by field
// name.
template <typename Message>
absl::StatusOr<Message> ParseChecked(const grpc::ByteBuffer& buffer,
                                     const RequestValidator& validator) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return absl::InvalidArgumentError("unreadable request");
  std::string wire;
  wire.reserve(buffer.Length());
  for (const grpc::Slice& s : slices) {
    wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  slices.clear();
  RETURN_IF_ERROR(validator.CheckWire(*Message::descriptor(), wire));
  RETURN_IF_ERROR(CheckUtf8Fields(*Message::descriptor(), wire));
  Message message;
  if (!message.ParseFromString(wire)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", Message::descriptor()->name(), " message"));
  }
  return message;
}

void Serialize(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  grpc::Slice slice(message.SerializeAsString());
  grpc::ByteBuffer buffer(&slice, 1);
  out->Swap(&buffer);
}

}  // namespace

GenerationService::GenerationService(const model::Tokenizer& tokenizer,
                                     const RequestValidator& validator, BatchEngine* engine,
                                     ServingMetrics* metrics, tpserve::v1::ModelInfo model_info,
                                     ApiKeys* api_keys)
    : tokenizer_(tokenizer),
      validator_(validator),
      engine_(engine),
      metrics_(metrics),
      model_info_(std::move(model_info)),
      api_keys_(api_keys) {}

absl::Status GenerationService::Authorize(const grpc::CallbackServerContext& context) const {
  if (api_keys_ == nullptr) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find("authorization");
  return api_keys_->Check(found == metadata.end()
                              ? absl::string_view()
                              : absl::string_view(found->second.data(), found->second.size()));
}

absl::Status GenerationService::Submit(const grpc::ByteBuffer& request, GenerateStream* stream) {
  ASSIGN_OR_RETURN(tpserve::v1::GenerateRequest parsed,
                   ParseChecked<tpserve::v1::GenerateRequest>(request, validator_));
  ASSIGN_OR_RETURN(RequestSpec spec, validator_.Validate(parsed));
  return engine_->Submit(std::move(spec), stream->sink());
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  auto* stream = new GenerateStream(context->deadline());
  absl::Status status = Authorize(*context);
  if (status.ok()) status = Submit(*request, stream);
  if (!status.ok()) {
    metrics_->CountRequest(status, "grpc");
    stream->Refuse(ToGrpcStatus(status));
  }
  return stream;
}

absl::Status GenerationService::DoTokenize(const grpc::ByteBuffer& request,
                                           grpc::ByteBuffer* response) const {
  ASSIGN_OR_RETURN(tpserve::v1::TokenizeRequest r,
                   ParseChecked<tpserve::v1::TokenizeRequest>(request, validator_));
  if (r.text().empty() == r.messages().empty()) {
    return absl::InvalidArgumentError("text: exactly one of text and messages must be given");
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                   validator_.PromptIds(r.text(), r.messages(), {}, r.add_special_tokens()));
  tpserve::v1::TokenizeResponse out;
  for (int32_t id : ids) {
    out.add_token_ids(id);
    out.add_pieces(model::Utf8Lossy(tokenizer_.TokenBytes(id)));
  }
  Serialize(out, response);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = Authorize(*context);
  if (status.ok()) status = DoTokenize(*request, response);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status GenerationService::DoDetokenize(const grpc::ByteBuffer& request,
                                             grpc::ByteBuffer* response) const {
  ASSIGN_OR_RETURN(tpserve::v1::DetokenizeRequest r,
                   ParseChecked<tpserve::v1::DetokenizeRequest>(request, validator_));
  for (int i = 0; i < r.token_ids_size(); ++i) {
    if (!tokenizer_.IsValidId(r.token_ids(i))) {
      return absl::InvalidArgumentError(absl::StrCat("token_ids[", i, "]: ", r.token_ids(i),
                                                     " is outside the vocabulary [0, ",
                                                     tokenizer_.vocab_size(), ")"));
    }
  }
  ASSIGN_OR_RETURN(std::string text, tokenizer_.Decode(r.token_ids(), r.skip_special_tokens()));
  tpserve::v1::DetokenizeResponse out;
  out.set_text(model::Utf8Lossy(text));
  Serialize(out, response);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = Authorize(*context);
  if (status.ok()) status = DoDetokenize(*request, response);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(
    grpc::CallbackServerContext* context, const tpserve::v1::GetModelInfoRequest* request,
    tpserve::v1::ModelInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status status = Authorize(*context); !status.ok()) {
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }
  *response = model_info_;
  const EngineStats stats = engine_->stats();
  response->set_ready(stats.ready);
  if (!stats.comm_backend.empty()) response->set_backend(stats.comm_backend);
  if (stats.world_size > 0) response->set_world_size(static_cast<uint32_t>(stats.world_size));
  response->set_kv_blocks_total(static_cast<uint32_t>(stats.kv_blocks_total));
  response->set_kv_blocks_free(static_cast<uint32_t>(stats.kv_blocks_free));
  response->set_kv_blocks_cached(static_cast<uint32_t>(stats.kv_blocks_cached));
  response->set_requests_running(static_cast<uint32_t>(stats.running));
  response->set_requests_waiting(static_cast<uint32_t>(stats.waiting));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tpserve::coordinator
