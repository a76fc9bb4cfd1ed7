// OpenAiServer: the OpenAI-compatible HTTP API beside the gRPC one (`--http_port`):
// POST /v1/completions and /v1/chat/completions (whole, or streamed as Server-Sent Events),
// GET /v1/models and GET /health (200 only while the world is ready and not draining).
// Requests are decoded by openai_request, validated by the gRPC API's RequestValidator and
// queued on the same BatchEngine, so a request gets the same tokens through either API.
// API keys (Authorization: Bearer, checked before a body is read) and TLS are the public gRPC
// port's. Served by HttpServer (Boost.Beast): a bounded number of connections, one thread
// each; a client that goes away is seen within 100 ms, streaming or not, and its requests are
// cancelled. Owns its listener and threads; Shutdown is idempotent and thread-safe.
#ifndef TPSERVE_SERVER_HTTP_OPENAI_SERVER_H_
#define TPSERVE_SERVER_HTTP_OPENAI_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "server/common/server_tls.h"
#include "server/coordinator/coordinator_server.h"
#include "server/http/http_server.h"
#include "server/http/openai_request.h"
#include "tpserve/v1/generate.pb.h"

namespace tpserve::http {

struct OpenAiServerOptions {
  std::string listen;                 // HOST:PORT; port 0 picks a free one
  ServerTlsOptions tls;               // the public gRPC port's; plaintext when off
  uint64_t max_body_bytes = 4 << 20;  // a larger body is 413
  int threads = 64;  // connections served at once (one thread each); another is 503
                     // (--http_max_connections)
  // A client must send each request (headers and body) within this, and take each write
  // within write_timeout, or the connection is dropped (slow-loris, stuck readers).
  absl::Duration read_timeout = absl::Seconds(10);
  absl::Duration write_timeout = absl::Seconds(30);
};

class OpenAiServer {
 public:
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Start(OpenAiServerOptions options,
                                                             coordinator::FrontEnd services);
  ~OpenAiServer();  // Shutdown()

  int port() const;
  // Stops listening and closes the connections, joining their threads; open streams end at
  // once (serve stops the engine first, which closes their requests).
  void Shutdown();

 private:
  OpenAiServer(OpenAiServerOptions options, coordinator::FrontEnd services);
  // HttpServer's hooks, on the connection threads. Admit: the API key, before the body is
  // read (every path but /health); false after answering 401.
  bool Admit(const HttpRequest& head, HttpReply& reply) const;
  void Route(const HttpRequest& req, HttpReply& reply) const;
  void Generate(Endpoint endpoint, const HttpRequest& req, HttpReply& reply) const;
  static void MethodNotAllowed(HttpReply& reply);
  nlohmann::json ModelObject() const;  // the served model, as OpenAI's model object

  const OpenAiServerOptions options_;
  const coordinator::FrontEnd services_;
  const int64_t started_unix_s_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace tpserve::http

#endif  // TPSERVE_SERVER_HTTP_OPENAI_SERVER_H_
