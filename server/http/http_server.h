// HttpServer: a small HTTP/1.1 server for the OpenAI API, on Boost.Beast (Debian's
// libboost-dev, header-only), with the bounds a public port needs and that cpp-httplib 0.11
// (Debian 12) lacks:
// - a request's head and body together must arrive within `request_timeout` of the moment
//   the server starts reading it (a slow-loris client holds a connection no longer);
// - its head is at most `max_header_bytes` (431), its body at most `max_body_bytes` whether
//   framed by Content-Length or chunked (413), and a compressed body is refused (415): the
//   server never inflates; trailers, field counts, chunk extensions and ambiguous framing
//   are bounded and refused as RequestReader says (request_reader.h);
// - whatever a connection's bytes or handler throw ends that connection alone (logged),
//   never the server;
// - at most `max_connections` connections are served at once; another is answered 503 and
//   closed, never queued unanswered (up to 16 such answers at once; past that, closed);
// - each write must be taken within `write_timeout`.
// The `admit` hook sees a request's head before its body is read (API keys: an unknown
// client's body is never read). One thread per connection runs `handle`, which may stream
// (chunked) and can ask whether the client has gone. TLS, and mutual TLS with a client CA,
// from PEM files; a file replaced on disk is taken up by the next connection (rotation).
// Owns its listener and connection threads; Shutdown is idempotent and thread-safe.
#ifndef TPSERVE_SERVER_HTTP_HTTP_SERVER_H_
#define TPSERVE_SERVER_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/common/server_tls.h"
#include "server/http/http_request.h"

namespace tpserve::http {

// The answer to one request, written on the connection's thread.
class HttpReply {
 public:
  virtual ~HttpReply() = default;
  // A whole response.
  virtual void Send(int status, absl::string_view content_type, std::string body,
                    const HeaderList& extra = {}) = 0;
  // A streamed (chunked) response: Begin once, then Write each piece, then End. Each returns
  // false once the client is gone or a write outlived the write timeout.
  virtual bool Begin(int status, absl::string_view content_type, const HeaderList& extra) = 0;
  virtual bool Write(absl::string_view bytes) = 0;
  virtual bool End() = 0;
  // Whether the client has closed its side, looked at without blocking.
  virtual bool ClientGone() = 0;
};

struct HttpHandlers {
  // Before the body is read: true to read it and handle the request; false after having
  // Sent a refusal (the connection is then closed, the body unread).
  std::function<bool(const HttpRequest& head, HttpReply& reply)> admit;
  std::function<void(const HttpRequest& request, HttpReply& reply)> handle;
  // The JSON body of an error the server answers by itself (400, 408, 411, 413, 415, 431,
  // 503), from its status and a message naming the limit.
  std::function<std::string(int status, const std::string& message)> error_body;
};

struct HttpServerOptions {
  std::string host;  // to bind
  int port = 0;      // 0: a free one
  ServerTlsOptions tls;
  int max_connections = 64;
  uint64_t max_body_bytes = 4 << 20;
  uint32_t max_header_bytes = 16 << 10;                // the head; and the trailers, apart
  uint32_t max_fields = 100;                           // in the head; and in the trailers
  uint32_t max_chunk_extension_bytes = 4 << 10;        // all of one request's chunks together
  absl::Duration request_timeout = absl::Seconds(10);  // head + body, from the first wait
  absl::Duration write_timeout = absl::Seconds(30);    // each write
};

class HttpServer {
 public:
  // Binds and starts listening; InvalidArgument for bad TLS files, Unavailable when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           HttpHandlers handlers);
  ~HttpServer();  // Shutdown()

  int port() const { return port_; }
  // Stops accepting, closes every connection (a blocked read or write fails) and joins the
  // threads.
  void Shutdown();

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
    bool busy = false;  // over the limit: answered 503 and closed
  };
  class Impl;

  HttpServer(HttpServerOptions options, HttpHandlers handlers);
  void AcceptLoop();
  // Serves connection `c` (socket `fd`) on its own thread: its requests, or a 503 when `busy`.
  void Serve(Connection* c, int fd, bool busy);
  // Forgets the connections that have ended (their threads detached: they touch nothing of
  // the server's any more).
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HttpServerOptions options_;
  const HttpHandlers handlers_;
  std::unique_ptr<Impl> impl_;  // the acceptor and the TLS context
  int port_ = 0;
  std::thread listener_;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  std::list<Connection> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve::http

#endif  // TPSERVE_SERVER_HTTP_HTTP_SERVER_H_
