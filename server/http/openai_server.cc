#include "server/http/openai_server.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"
#include "server/http/choice_stream.h"
#include "server/http/http_server.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"

namespace tpserve::http {
namespace {

using nlohmann::json;

constexpr char kApi[] = "http";
// A stream with nothing to send writes an SSE comment this often: a client that went away
// is found by a failing write, so this bounds how long its requests outlive it.
constexpr absl::Duration kHeartbeat = absl::Milliseconds(100);

void Reply(HttpReply& reply, int status, const json& body, const HeaderList& extra = {}) {
  reply.Send(status, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace),
             extra);
}

void ReplyError(HttpReply& reply, const absl::Status& status, const HeaderList& extra = {}) {
  Reply(reply, HttpStatus(status), ErrorBody(status), extra);
}

// The error the transport's own refusals (HttpServer) stand for.
absl::Status TransportError(int http, const std::string& message) {
  switch (http) {
    case 503:
      return absl::UnavailableError(message);
    case 408:
      return absl::DeadlineExceededError(message);
    default:
      return absl::InvalidArgumentError(message);
  }
}

// %XX escapes of a path decoded (a model id may hold any character).
std::string DecodePath(absl::string_view path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    int byte = 0;
    if (path[i] == '%' && i + 2 < path.size() &&
        absl::SimpleHexAtoi(path.substr(i + 1, 2), &byte)) {
      out.push_back(static_cast<char>(byte));
      i += 2;
    } else {
      out.push_back(path[i]);
    }
  }
  return out;
}

absl::StatusOr<std::pair<std::string, int>> SplitListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_port: '", listen, "' is not HOST:PORT with a port in [0, 65535]"));
  }
  return std::make_pair(listen.substr(0, colon), port);
}

// The request ids of one HTTP request's choices share a random stem.
std::string NewRequestId() {
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* gen = new absl::BitGen();
  absl::MutexLock lock(&mu);
  return absl::StrCat("http-", absl::Hex(absl::Uniform<uint64_t>(*gen), absl::kZeroPad16));
}

// What one generation request needs on its HTTP thread.
class GenerationCall {
 public:
  GenerationCall(const coordinator::FrontEnd& services, OpenAiRequest request)
      : services_(services),
        request_(std::move(request)),
        stream_(std::make_shared<ChoiceStream>(request_.n)) {}

  // Validates and queues every choice; on a refusal, cancels those already queued.
  absl::Status Submit() {
    const std::string id = NewRequestId();
    header_ = {ResponseId(request_.endpoint, id), absl::ToUnixSeconds(absl::Now()), request_.model};
    for (uint32_t i = 0; i < request_.n; ++i) {
      tpserve::v1::GenerateRequest g = request_.generate;
      g.set_request_id(request_.n > 1 ? absl::StrCat(id, "-", i) : id);
      if (g.has_seed()) g.set_seed(g.seed() + i);  // choice i draws from seed + i
      absl::StatusOr<coordinator::RequestSpec> spec =
          services_.validator->Validate(g, coordinator::MaxTokensUnset::kRestOfContext);
      absl::Status status = spec.status();
      if (status.ok()) {
        spec->api = kApi;
        status = services_.engine->Submit(*std::move(spec), stream_->Sink(i));
      }
      if (!status.ok()) {
        status = InRequestTerms(status, request_);
        stream_->Cancel();
        services_.metrics->CountRequest(status, kApi);
        return status;
      }
    }
    return absl::OkStatus();
  }

  // Waits for every choice and answers with the whole response (or the first error). A
  // client that goes away meanwhile has its requests cancelled, and no answer.
  void ReplyWhole(HttpReply& reply) {
    std::vector<tpserve::v1::GenerateResponse> choices(request_.n);
    absl::Status failed;
    absl::Time next_look = absl::Now() + kHeartbeat;
    while (!stream_->Done()) {
      std::optional<ChoiceStream::Event> e = stream_->Next(kHeartbeat);
      if (absl::Now() >= next_look) {  // every 100 ms, whether tokens come or not
        if (reply.ClientGone()) {
          stream_->Cancel();
          return;
        }
        next_look = absl::Now() + kHeartbeat;
      }
      if (!e.has_value()) continue;
      if (e->message.has_value()) {
        Accumulate(*e->message, &choices[e->index]);
      } else if (!e->closed.ok() && failed.ok()) {
        failed = e->closed;
        stream_->Cancel();
      }
    }
    if (!failed.ok()) return ReplyError(reply, failed);
    Reply(reply, 200, WholeResponse(request_, header_, choices));
  }

  // Writes the choices' messages as SSE chunks as they come; a client that goes away has
  // its requests cancelled.
  void Pump(HttpReply& reply) {
    const auto write = [&](const std::string& bytes) {
      if (reply.Write(bytes)) return true;
      stream_->Cancel();
      return false;
    };
    if (!reply.Begin(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) {
      stream_->Cancel();
      return;
    }
    std::vector<ChunkPosition> positions(request_.n);
    tpserve::v1::Usage usage;
    absl::Status failed;
    while (!stream_->Done()) {
      std::optional<ChoiceStream::Event> e = stream_->Next(kHeartbeat);
      if (!e.has_value()) {
        if (!write(": keep-alive\n\n")) return;
        continue;
      }
      if (!e->message.has_value()) {
        if (!e->closed.ok() && failed.ok()) {
          failed = e->closed;
          stream_->Cancel();
        }
        continue;
      }
      const tpserve::v1::GenerateResponse& m = *e->message;
      const nlohmann::json chunk =
          StreamChunk(request_, header_, e->index, m, &positions[e->index]);
      if (!chunk.is_null() && !write(SseEvent(chunk))) return;
      if (m.has_usage()) {
        AddChoiceUsage(m.usage(), &usage);
      }
    }
    if (!failed.ok()) {
      if (!write(SseEvent(ErrorBody(failed)))) return;
    } else if (request_.include_usage) {
      if (!write(SseEvent(UsageChunk(request_, header_, usage)))) return;
    }
    if (write(kSseDone)) reply.End();
  }

 private:
  const coordinator::FrontEnd& services_;
  const OpenAiRequest request_;
  const std::shared_ptr<ChoiceStream> stream_;
  ResponseHeader header_;
};

}  // namespace

OpenAiServer::OpenAiServer(OpenAiServerOptions options, coordinator::FrontEnd services)
    : options_(std::move(options)),
      services_(std::move(services)),
      started_unix_s_(absl::ToUnixSeconds(absl::Now())) {}

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(OpenAiServerOptions options,
                                                                  coordinator::FrontEnd services) {
  RETURN_IF_ERROR(CheckServerTls(options.tls));
  ASSIGN_OR_RETURN(const auto host_port, SplitListen(options.listen));
  std::unique_ptr<OpenAiServer> s(new OpenAiServer(std::move(options), std::move(services)));
  const OpenAiServerOptions& o = s->options_;
  HttpServerOptions transport;
  std::tie(transport.host, transport.port) = host_port;
  transport.tls = o.tls;
  transport.max_connections = o.threads;
  transport.max_body_bytes = o.max_body_bytes;
  transport.request_timeout = o.read_timeout;
  transport.write_timeout = o.write_timeout;
  HttpHandlers handlers;
  OpenAiServer* self = s.get();
  handlers.admit = [self](const HttpRequest& head, HttpReply& reply) {
    return self->Admit(head, reply);
  };
  handlers.handle = [self](const HttpRequest& request, HttpReply& reply) {
    self->Route(request, reply);
  };
  handlers.error_body = [](int status, const std::string& message) {
    return ErrorBody(TransportError(status, message)).dump();
  };
  ASSIGN_OR_RETURN(s->server_, HttpServer::Start(std::move(transport), std::move(handlers)));
  LOG(INFO) << "OpenAI HTTP API on " << host_port.first << ":" << s->server_->port()
            << (o.tls.enabled() ? " (TLS)" : "");
  return s;
}

OpenAiServer::~OpenAiServer() { Shutdown(); }

int OpenAiServer::port() const { return server_->port(); }

void OpenAiServer::Shutdown() {
  if (server_ != nullptr) server_->Shutdown();
}

bool OpenAiServer::Admit(const HttpRequest& head, HttpReply& reply) const {
  if (head.path == "/health" || services_.api_keys == nullptr) return true;
  const absl::Status status = services_.api_keys->Check(head.Header("Authorization"));
  if (status.ok()) return true;
  if (head.method == "POST") services_.metrics->CountRequest(status, kApi);
  ReplyError(reply, status, {{"WWW-Authenticate", "Bearer"}});  // RFC 6750
  return false;
}

void OpenAiServer::Generate(Endpoint endpoint, const HttpRequest& req, HttpReply& reply) const {
  if (!absl::StartsWithIgnoreCase(req.Header("Content-Type"), "application/json")) {
    services_.metrics->CountRequest(absl::InvalidArgumentError(""), kApi);
    return Reply(reply, 415,
                 ErrorBody(absl::InvalidArgumentError("Content-Type: must be application/json")));
  }
  absl::StatusOr<OpenAiRequest> request =
      DecodeOpenAiRequest(endpoint, req.body, services_.model_info.model_name());
  if (!request.ok()) {
    services_.metrics->CountRequest(request.status(), kApi);
    return ReplyError(reply, request.status());
  }
  const bool stream = request->stream;
  GenerationCall call(services_, *std::move(request));
  if (absl::Status submitted = call.Submit(); !submitted.ok()) {
    return ReplyError(reply, submitted);
  }
  if (stream) return call.Pump(reply);
  call.ReplyWhole(reply);
}

json OpenAiServer::ModelObject() const {
  const tpserve::v1::ModelInfo& info = services_.model_info;
  return {{"id", info.model_name()},
          {"object", "model"},
          {"created", started_unix_s_},
          {"owned_by", "tpserve"},
          {"max_model_len", info.context_length()}};
}

void OpenAiServer::Route(const HttpRequest& req, HttpReply& reply) const {
  const std::string path = DecodePath(req.path);
  constexpr absl::string_view kModelPrefix = "/v1/models/";
  const bool post = req.method == "POST";
  const bool get = req.method == "GET";
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (!post) return MethodNotAllowed(reply);
    return Generate(path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChatCompletions,
                    req, reply);
  }
  if (path == "/v1/models") {
    if (!get) return MethodNotAllowed(reply);
    return Reply(reply, 200, {{"object", "list"}, {"data", json::array({ModelObject()})}});
  }
  if (absl::StartsWith(path, kModelPrefix) && path.size() > kModelPrefix.size()) {
    if (!get) return MethodNotAllowed(reply);
    const absl::string_view name = absl::string_view(path).substr(kModelPrefix.size());
    if (absl::Status known = CheckServedModel(name, services_.model_info.model_name());
        !known.ok()) {
      return ReplyError(reply, known);
    }
    return Reply(reply, 200, ModelObject());
  }
  if (path == "/health") {
    if (!get) return MethodNotAllowed(reply);
    if (services_.ready()) return Reply(reply, 200, {{"status", "ok"}});
    const std::string why = services_.engine->stats().down_reason;  // names the rank
    return ReplyError(reply, absl::UnavailableError(
                                 absl::StrCat("the server is not ready (world down or draining)",
                                              why.empty() ? "" : ": ", why)));
  }
  ReplyError(reply, absl::NotFoundError("path: no such route (POST /v1/completions, "
                                        "POST /v1/chat/completions, GET /v1/models, GET /health)"));
}

void OpenAiServer::MethodNotAllowed(HttpReply& reply) {
  Reply(reply, 405, ErrorBody(absl::InvalidArgumentError("method: not allowed on this path")));
}

}  // namespace tpserve::http
