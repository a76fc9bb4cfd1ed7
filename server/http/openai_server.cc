#include "server/http/openai_server.h"

#include <csignal>
#include <optional>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"
#include "server/http/choice_stream.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"

namespace tpserve::http {
namespace {

using nlohmann::json;

constexpr char kApi[] = "http";
// A stream with nothing to send writes an SSE comment this often: a client that went away
// is found by a failing write, so this bounds how long its requests outlive it.
constexpr absl::Duration kHeartbeat = absl::Milliseconds(100);

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void ReplyError(httplib::Response& res, const absl::Status& status) {
  Reply(res, HttpStatus(status), ErrorBody(status));
}

// The error an HTTP status set by the library (or by a route with no body) stands for.
absl::Status LibraryError(int http, uint64_t max_body_bytes) {
  switch (http) {
    case 404:
      return absl::NotFoundError(
          "path: no such route (POST /v1/completions, "
          "POST /v1/chat/completions, GET /v1/models, GET /health)");
    case 405:
      return absl::InvalidArgumentError("method: not allowed on this path");
    case 413:
      return absl::InvalidArgumentError(
          absl::StrCat("body: exceeds the limit of ", max_body_bytes, " bytes"));
    default:
      return absl::InvalidArgumentError(absl::StrCat("request: malformed (HTTP ", http, ")"));
  }
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
        stream_->Cancel();
        services_.metrics->CountRequest(status, kApi);
        return status;
      }
    }
    return absl::OkStatus();
  }

  // Waits for every choice and answers with the whole response (or the first error).
  void ReplyWhole(httplib::Response& res) {
    std::vector<tpserve::v1::GenerateResponse> choices(request_.n);
    absl::Status failed;
    while (!stream_->Done()) {
      std::optional<ChoiceStream::Event> e = stream_->Next(absl::Seconds(1));
      if (!e.has_value()) continue;
      if (e->message.has_value()) {
        Accumulate(*e->message, &choices[e->index]);
      } else if (!e->closed.ok() && failed.ok()) {
        failed = e->closed;
        stream_->Cancel();
      }
    }
    if (!failed.ok()) return ReplyError(res, failed);
    Reply(res, 200, WholeResponse(request_, header_, choices));
  }

  // Writes the choices' messages as SSE chunks as they come; false when the client is gone
  // (its requests are then cancelled).
  bool Pump(httplib::DataSink& sink) {
    const auto write = [&](const std::string& bytes) {
      if (sink.write(bytes.data(), bytes.size())) return true;
      stream_->Cancel();
      return false;
    };
    std::vector<bool> started(request_.n, false);
    tpserve::v1::Usage usage;
    absl::Status failed;
    while (!stream_->Done()) {
      std::optional<ChoiceStream::Event> e = stream_->Next(kHeartbeat);
      if (!e.has_value()) {
        if (!write(": keep-alive\n\n")) return false;
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
      if (!write(SseEvent(StreamChunk(request_, header_, e->index, m, !started[e->index])))) {
        return false;
      }
      started[e->index] = true;
      if (m.has_usage()) {
        usage.set_prompt_tokens(m.usage().prompt_tokens());
        usage.set_completion_tokens(usage.completion_tokens() + m.usage().completion_tokens());
      }
    }
    if (!failed.ok()) {
      if (!write(SseEvent(ErrorBody(failed)))) return false;
    } else if (request_.include_usage) {
      if (!write(SseEvent(UsageChunk(request_, header_, usage)))) return false;
    }
    if (!write(kSseDone)) return false;
    sink.done();
    return true;
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
  // A client gone mid-write must fail that write, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<OpenAiServer> s(new OpenAiServer(std::move(options), std::move(services)));
  const OpenAiServerOptions& o = s->options_;
  if (o.tls.enabled()) {
    auto tls = std::make_unique<httplib::SSLServer>(
        o.tls.cert_file.c_str(), o.tls.key_file.c_str(),
        o.tls.client_ca_file.empty() ? nullptr : o.tls.client_ca_file.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError("--http_port: cannot set up TLS with --tls_cert_file");
    }
    s->server_ = std::move(tls);
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  const int threads = o.threads;
  s->server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s->server_->set_read_timeout(absl::ToChronoSeconds(o.read_timeout));
  s->server_->set_write_timeout(absl::ToChronoSeconds(o.write_timeout));
  s->server_->set_payload_max_length(o.max_body_bytes);
  s->Route();
  const auto& [host, port] = host_port;
  s->port_ = port == 0 ? s->server_->bind_to_any_port(host)
                       : (s->server_->bind_to_port(host, port) ? port : -1);
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("--http_port: cannot listen on ", o.listen));
  }
  s->listener_ = std::thread([server = s->server_.get()] { server->listen_after_bind(); });
  LOG(INFO) << "OpenAI HTTP API on " << host << ":" << s->port_
            << (o.tls.enabled() ? " (TLS)" : "");
  return s;
}

OpenAiServer::~OpenAiServer() { Shutdown(); }

void OpenAiServer::Shutdown() {
  if (server_ != nullptr) server_->stop();
  if (listener_.joinable()) listener_.join();
}

bool OpenAiServer::Authorized(const httplib::Request& req, httplib::Response& res) const {
  if (services_.api_keys == nullptr) return true;
  const absl::Status status = services_.api_keys->Check(req.get_header_value("Authorization"));
  if (!status.ok()) {
    res.set_header("WWW-Authenticate", "Bearer");  // RFC 6750
    ReplyError(res, status);
  }
  return status.ok();
}

void OpenAiServer::Generate(Endpoint endpoint, const httplib::Request& req,
                            httplib::Response& res) const {
  if (!Authorized(req, res)) {
    services_.metrics->CountRequest(absl::UnauthenticatedError(""), kApi);
    return;
  }
  if (!absl::StartsWithIgnoreCase(req.get_header_value("Content-Type"), "application/json")) {
    services_.metrics->CountRequest(absl::InvalidArgumentError(""), kApi);
    return Reply(res, 415,
                 ErrorBody(absl::InvalidArgumentError("Content-Type: must be application/json")));
  }
  absl::StatusOr<OpenAiRequest> request =
      DecodeOpenAiRequest(endpoint, req.body, services_.model_info.model_name());
  if (!request.ok()) {
    services_.metrics->CountRequest(request.status(), kApi);
    return ReplyError(res, request.status());
  }
  const bool stream = request->stream;
  auto call = std::make_shared<GenerationCall>(services_, *std::move(request));
  if (absl::Status submitted = call->Submit(); !submitted.ok()) return ReplyError(res, submitted);
  if (!stream) return call->ReplyWhole(res);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [call](size_t /*offset*/, httplib::DataSink& sink) { return call->Pump(sink); });
}

json OpenAiServer::ModelObject() const {
  const tpserve::v1::ModelInfo& info = services_.model_info;
  return {{"id", info.model_name()},
          {"object", "model"},
          {"created", started_unix_s_},
          {"owned_by", "tpserve"},
          {"max_model_len", info.context_length()}};
}

void OpenAiServer::Models(const httplib::Request& req, httplib::Response& res) const {
  if (!Authorized(req, res)) return;
  Reply(res, 200, {{"object", "list"}, {"data", json::array({ModelObject()})}});
}

void OpenAiServer::Model(const httplib::Request& req, httplib::Response& res) const {
  if (!Authorized(req, res)) return;
  const std::string name = req.matches.size() > 1 ? req.matches[1].str() : std::string();
  if (absl::Status known = CheckServedModel(name, services_.model_info.model_name()); !known.ok()) {
    return ReplyError(res, known);
  }
  Reply(res, 200, ModelObject());
}

void OpenAiServer::Route() {
  using httplib::Request;
  using httplib::Response;
  server_->Post("/v1/completions", [this](const Request& req, Response& res) {
    Generate(Endpoint::kCompletions, req, res);
  });
  server_->Post("/v1/chat/completions", [this](const Request& req, Response& res) {
    Generate(Endpoint::kChatCompletions, req, res);
  });
  server_->Get("/v1/models", [this](const Request& req, Response& res) { Models(req, res); });
  server_->Get("/v1/models/(.+)", [this](const Request& req, Response& res) { Model(req, res); });
  server_->Get("/health", [this](const Request&, Response& res) {
    if (services_.ready()) return Reply(res, 200, {{"status", "ok"}});
    const std::string why = services_.engine->stats().down_reason;  // names the rank
    ReplyError(
        res, absl::UnavailableError(absl::StrCat("the server is not ready (world down or draining)",
                                                 why.empty() ? "" : ": ", why)));
  });
  // The other methods on the known paths: 405.
  const auto not_allowed = [](const Request&, Response& res) { res.status = 405; };
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    server_->Get(path, not_allowed).Put(path, not_allowed).Delete(path, not_allowed);
  }
  for (const char* path : {"/v1/models", "/health"}) {
    server_->Post(path, not_allowed).Put(path, not_allowed).Delete(path, not_allowed);
  }
  const uint64_t max_body = options_.max_body_bytes;
  server_->set_error_handler([max_body](const Request&, Response& res) {
    if (res.body.empty()) {
      res.set_content(ErrorBody(LibraryError(res.status, max_body)).dump(), "application/json");
    }
  });
}

}  // namespace tpserve::http
