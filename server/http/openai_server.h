// OpenAiServer: the OpenAI-compatible HTTP API beside the gRPC one (`--http_port`):
// POST /v1/completions and /v1/chat/completions (whole, or streamed as Server-Sent Events),
// GET /v1/models and GET /health (200 only while the world is ready and not draining).
// Requests are decoded by openai_request, validated by the gRPC API's RequestValidator and
// queued on the same BatchEngine, so a request gets the same tokens through either API.
// API keys (Authorization: Bearer) and TLS are the public gRPC port's. Served by cpp-httplib
// (Debian's libcpp-httplib): a bounded pool of connection threads, each stream holding one,
// with one write in flight per stream; a client that goes away is seen at the next write (a
// stream writes at least every 100 ms) and its requests are cancelled. Owns its listener and
// threads; Shutdown is idempotent and thread-safe.
#ifndef TPSERVE_SERVER_HTTP_OPENAI_SERVER_H_
#define TPSERVE_SERVER_HTTP_OPENAI_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "server/common/server_tls.h"
#include "server/coordinator/coordinator_server.h"
#include "server/http/openai_request.h"
#include "tpserve/v1/generate.pb.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tpserve::http {

struct OpenAiServerOptions {
  std::string listen;                 // HOST:PORT; port 0 picks a free one
  ServerTlsOptions tls;               // the public gRPC port's; plaintext when off
  uint64_t max_body_bytes = 4 << 20;  // a larger body is 413
  int threads = 64;                   // connections served at once; each open stream holds one
  // A client must send its request (headers and body) within this, and take each write
  // within write_timeout, or the connection is dropped (slow-loris, stuck readers).
  absl::Duration read_timeout = absl::Seconds(10);
  absl::Duration write_timeout = absl::Seconds(30);
};

class OpenAiServer {
 public:
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Start(OpenAiServerOptions options,
                                                             coordinator::FrontEnd services);
  ~OpenAiServer();  // Shutdown()

  int port() const { return port_; }
  // Stops listening and waits for the connection threads; open streams end at their next
  // write (the engine closes their requests when it stops).
  void Shutdown();

 private:
  OpenAiServer(OpenAiServerOptions options, coordinator::FrontEnd services);
  // The handlers, on the connection threads.
  void Route();
  // True when no key is asked for or the request's Authorization holds one; else answers 401.
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  void Generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) const;
  void Models(const httplib::Request& req, httplib::Response& res) const;  // GET /v1/models
  void Model(const httplib::Request& req, httplib::Response& res) const;   // GET /v1/models/ID
  nlohmann::json ModelObject() const;  // the served model, as OpenAI's model object

  const OpenAiServerOptions options_;
  const coordinator::FrontEnd services_;
  const int64_t started_unix_s_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = 0;
};

}  // namespace tpserve::http

#endif  // TPSERVE_SERVER_HTTP_OPENAI_SERVER_H_
