#include "server/http/http_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/common/catch_all.h"
#include "server/http/request_reader.h"

namespace tpserve::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;

beast::string_view Beast(absl::string_view s) { return {s.data(), s.size()}; }

// How long a lingering close reads what a refused client still sends.
constexpr absl::Duration kLinger = absl::Seconds(2);
// Connections beyond the limit answered 503 at once (each on a short-lived thread, for at
// most the linger); more than that are closed unanswered.
constexpr int kBusyAnswerers = 16;

std::chrono::milliseconds Chrono(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// The modification times of the TLS files, to see a rotation.
std::vector<std::filesystem::file_time_type> FileTimes(const ServerTlsOptions& tls) {
  std::vector<std::filesystem::file_time_type> times;
  for (const std::string* f : {&tls.cert_file, &tls.key_file, &tls.client_ca_file}) {
    std::error_code ec;
    times.push_back(f->empty() ? std::filesystem::file_time_type{}
                               : std::filesystem::last_write_time(*f, ec));
  }
  return times;
}

absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsContext(const ServerTlsOptions& tls) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  try {
    context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                         ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                         ssl::context::no_tlsv1_1);
    context->use_certificate_chain_file(tls.cert_file);
    context->use_private_key_file(tls.key_file, ssl::context::pem);
    if (!tls.client_ca_file.empty()) {
      context->load_verify_file(tls.client_ca_file);
      context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
  } catch (const boost::system::system_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(tls.flags.cert, ": cannot set up TLS for the HTTP port: ", e.what()));
  }
  return context;
}

// One connection's requests, in turn, on its own thread and io_context: every read and
// write is an asynchronous operation run to its end under a deadline (Beast's timeouts work
// only for those).
template <class Stream>
class Session final : public HttpReply {
 public:
  Session(asio::io_context& io, Stream& stream, int fd, const HttpServerOptions& options,
          const HttpHandlers& handlers)
      : io_(io),
        stream_(stream),
        fd_(fd),
        options_(options),
        handlers_(handlers),
        reader_(RequestLimits{.max_header_bytes = options.max_header_bytes,
                              .max_body_bytes = options.max_body_bytes,
                              .max_fields = options.max_fields,
                              .max_chunk_extension_bytes = options.max_chunk_extension_bytes}) {}

  // Serves requests until the client or an error closes the connection.
  void Run() {
    while (true) {
      responded_ = false;
      failed_ = false;
      closing_ = false;
      if (!Exchange() || failed_ || closing_ || !responded_) break;
    }
    if (refused_ && !failed_) Linger();
  }

  // Answers 503 (every connection is taken) without reading the request, then closes.
  void RefuseBusy() {
    Refuse(503, absl::StrCat("connections: the server serves at most ", options_.max_connections,
                             " at once; retry later"));
    if (!failed_) Linger();
  }

  // A TLS handshake within the request timeout.
  bool Handshake() {
    return !Await(options_.request_timeout,
                  [&](auto done) { stream_.async_handshake(ssl::stream_base::server, done); });
  }

  void Send(int status, absl::string_view content_type, std::string body,
            const HeaderList& extra) override {
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), 11};
    res.set(bhttp::field::content_type, Beast(content_type));
    for (const auto& [name, value] : extra) res.set(Beast(name), Beast(value));
    res.keep_alive(!closing_);
    res.body() = std::move(body);
    res.prepare_payload();
    responded_ = true;
    if (Await(options_.write_timeout, [&](auto done) { bhttp::async_write(stream_, res, done); })) {
      failed_ = true;
    }
  }

  bool Begin(int status, absl::string_view content_type, const HeaderList& extra) override {
    bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(status), 11};
    res.set(bhttp::field::content_type, Beast(content_type));
    for (const auto& [name, value] : extra) res.set(Beast(name), Beast(value));
    res.keep_alive(!closing_);
    res.chunked(true);
    bhttp::response_serializer<bhttp::empty_body> head{res};
    responded_ = true;
    failed_ = static_cast<bool>(Await(options_.write_timeout, [&](auto done) {
      bhttp::async_write_header(stream_, head, done);
    }));
    return !failed_;
  }

  bool Write(absl::string_view bytes) override {
    if (failed_) return false;
    failed_ = static_cast<bool>(Await(options_.write_timeout, [&](auto done) {
      asio::async_write(stream_, bhttp::make_chunk(asio::const_buffer(bytes.data(), bytes.size())),
                        done);
    }));
    return !failed_;
  }

  bool End() override {
    if (failed_) return false;
    failed_ = static_cast<bool>(Await(options_.write_timeout, [&](auto done) {
      asio::async_write(stream_, bhttp::make_chunk_last(), done);
    }));
    return !failed_;
  }

  bool ClientGone() override {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

 private:
  // Runs the operation `start` begins (given its completion handler) to its end, or until
  // `timeout` passes (beast::error::timeout); its error.
  template <class Start>
  beast::error_code Await(absl::Duration timeout, Start start) {
    beast::get_lowest_layer(stream_).expires_after(Chrono(timeout));
    beast::error_code result = asio::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io_.restart();
    io_.run();
    return result;
  }

  // An error the server answers by itself; the connection closes after it.
  void Refuse(int status, const std::string& message) {
    closing_ = true;
    refused_ = true;
    Send(status, "application/json", handlers_.error_body(status, message), {});
  }

  // After a refusal, the client may still be sending the body it was refused for: a close
  // now would reset the connection before it reads the answer. The send side is shut, and
  // what comes is read and dropped, bounded in bytes and time (a lingering close).
  void Linger() {
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_send, ignored);
    const absl::Time deadline = absl::Now() + kLinger;
    char sink[16384];
    uint64_t dropped = 0;
    while (dropped <= options_.max_body_bytes + options_.max_header_bytes) {
      const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      pollfd p{fd_, POLLIN, 0};
      if (left_ms <= 0 || ::poll(&p, 1, static_cast<int>(left_ms)) <= 0) return;
      const ssize_t n = ::recv(fd_, sink, sizeof(sink), MSG_DONTWAIT);
      if (n <= 0) return;
      dropped += static_cast<uint64_t>(n);
    }
  }

  // Parses what has come of the current request, reading more from the connection while
  // the reader wants it, until `deadline`: the reader's progress (kMore with `error` set
  // when the connection ended, failed or timed out first).
  RequestReader::Progress Read(absl::Time deadline, beast::error_code& error) {
    while (true) {
      const RequestReader::Progress progress = reader_.Parse();
      if (progress != RequestReader::Progress::kMore) return progress;
      size_t n = 0;
      error = Await(deadline - absl::Now(), [&](auto done) {
        stream_.async_read_some(asio::buffer(chunk_, sizeof(chunk_)),
                                [&n, done](beast::error_code ec, size_t got) {
                                  n = got;
                                  done(ec);
                                });
      });
      if (n > 0) reader_.Feed(absl::string_view(chunk_, n));
      if (error && n == 0) return RequestReader::Progress::kMore;
    }
  }

  // Reads one request and answers it; false when the connection is to close now.
  bool Exchange() {
    reader_.Next();
    const absl::Time deadline = absl::Now() + options_.request_timeout;
    beast::error_code ec;
    RequestReader::Progress progress = Read(deadline, ec);
    if (progress == RequestReader::Progress::kRefused) {
      Refuse(reader_.refusal().status, reader_.refusal().message);
      return false;
    }
    // A silent or closed connection (idle keep-alive, slow-loris) is closed unanswered.
    if (progress != RequestReader::Progress::kHead) return false;
    HttpRequest& request = reader_.request();
    closing_ = !reader_.keep_alive();
    if (!Framed(request)) return false;
    closing_ = true;  // a refusal by `admit` closes: the body stays unread
    if (!handlers_.admit(request, *this)) {
      refused_ = true;
      return false;
    }
    closing_ = !reader_.keep_alive();
    if (absl::EqualsIgnoreCase(request.Header("Expect"), "100-continue")) {
      bhttp::response<bhttp::empty_body> go_on{bhttp::status::continue_, 11};
      if (Await(options_.write_timeout,
                [&](auto done) { bhttp::async_write(stream_, go_on, done); })) {
        return false;
      }
    }
    progress = Read(deadline, ec);
    if (progress == RequestReader::Progress::kRefused) {
      Refuse(reader_.refusal().status, reader_.refusal().message);
      return false;
    }
    if (progress != RequestReader::Progress::kDone) {
      if (ec == beast::error::timeout) {
        Refuse(408, absl::StrCat("request: not received within ",
                                 absl::FormatDuration(options_.request_timeout)));
      }
      return false;
    }
    handlers_.handle(request, *this);
    return true;
  }

  // False (after refusing it) for a body the server will not read: compressed, or in a
  // transfer coding other than chunked.
  bool Framed(const HttpRequest& request) {
    const std::string encoding = request.Header("Content-Encoding");
    if (!encoding.empty() && !absl::EqualsIgnoreCase(encoding, "identity")) {
      Refuse(415, absl::StrCat("Content-Encoding: '", encoding,
                               "' is not supported; send the body uncompressed"));
      return false;
    }
    const std::string coding = request.Header("Transfer-Encoding");
    if (!coding.empty() && !absl::EqualsIgnoreCase(coding, "chunked")) {
      Refuse(415, absl::StrCat("Transfer-Encoding: '", coding, "' is not supported (chunked is)"));
      return false;
    }
    return true;
  }

  asio::io_context& io_;
  Stream& stream_;
  const int fd_;
  const HttpServerOptions& options_;
  const HttpHandlers& handlers_;
  RequestReader reader_;
  char chunk_[16384];       // what one read takes from the connection
  bool responded_ = false;  // this request has had its answer (or its head)
  bool failed_ = false;     // a write failed: the connection is done
  bool closing_ = false;    // the connection closes after this answer
  bool refused_ = false;    // the server refused a request it may not have read whole
};

}  // namespace

class HttpServer::Impl {
 public:
  explicit Impl(const ServerTlsOptions& tls) : tls_(tls), acceptor_(io_) {}

  // The TLS context, made again when a file changed since the last one was made.
  absl::StatusOr<std::shared_ptr<ssl::context>> TlsContext() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    std::vector<std::filesystem::file_time_type> times = FileTimes(tls_);
    if (context_ == nullptr || times != times_) {
      absl::StatusOr<std::shared_ptr<ssl::context>> made = MakeTlsContext(tls_);
      if (!made.ok()) {
        if (context_ == nullptr) return made.status();
        LOG(WARNING) << "HTTP port: keeping the previous TLS files: " << made.status();
        return context_;
      }
      context_ = *std::move(made);
      times_ = std::move(times);
    }
    return context_;
  }

  asio::io_context& io() { return io_; }
  tcp::acceptor& acceptor() { return acceptor_; }
  // The listening socket's protocol (IPv4 or IPv6), set once it is bound.
  tcp protocol() const { return protocol_; }
  void set_protocol(tcp protocol) { protocol_ = protocol; }

 private:
  const ServerTlsOptions tls_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  tcp protocol_ = tcp::v4();
  absl::Mutex mu_;
  std::shared_ptr<ssl::context> context_ ABSL_GUARDED_BY(mu_);
  std::vector<std::filesystem::file_time_type> times_ ABSL_GUARDED_BY(mu_);
};

HttpServer::HttpServer(HttpServerOptions options, HttpHandlers handlers)
    : options_(std::move(options)),
      handlers_(std::move(handlers)),
      impl_(std::make_unique<Impl>(options_.tls)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              HttpHandlers handlers) {
  std::unique_ptr<HttpServer> s(new HttpServer(std::move(options), std::move(handlers)));
  if (s->options_.tls.enabled()) {
    absl::StatusOr<std::shared_ptr<ssl::context>> context = s->impl_->TlsContext();
    if (!context.ok()) return context.status();
  }
  const std::string where = absl::StrCat(s->options_.host, ":", s->options_.port);
  try {
    tcp::resolver resolver(s->impl_->io());
    const tcp::endpoint endpoint =
        resolver
            .resolve(s->options_.host, std::to_string(s->options_.port),
                     tcp::resolver::passive | tcp::resolver::numeric_service)
            .begin()
            ->endpoint();
    tcp::acceptor& acceptor = s->impl_->acceptor();
    acceptor.open(endpoint.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(endpoint);
    acceptor.listen(asio::socket_base::max_listen_connections);
    s->port_ = acceptor.local_endpoint().port();
    s->impl_->set_protocol(endpoint.protocol());
  } catch (const boost::system::system_error& e) {
    return absl::UnavailableError(
        absl::StrCat("--http_port: cannot listen on ", where, ": ", e.what()));
  }
  s->listener_ = std::thread([server = s.get()] { server->AcceptLoop(); });
  return s;
}

HttpServer::~HttpServer() { Shutdown(); }

void HttpServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  ::shutdown(impl_->acceptor().native_handle(), SHUT_RDWR);  // wakes accept()
  if (listener_.joinable()) listener_.join();
  std::list<Connection> open;
  {
    absl::MutexLock lock(&mu_);
    for (Connection& c : connections_) {
      if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);  // its blocked read or write fails
    }
    open.splice(open.end(), connections_);  // the nodes, and so the threads' `c`, stay put
  }
  for (Connection& c : open) c.thread.join();  // each takes mu_ as it ends
}

void HttpServer::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->done.load(std::memory_order_acquire)) {
      // It has let go of everything of this server's; only its locals' destructors remain.
      // Detached rather than joined: the accept loop never waits on a connection's thread.
      it->thread.detach();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void HttpServer::AcceptLoop() {
  const int listen_fd = impl_->acceptor().native_handle();
  while (!stopping_.load()) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      PLOG(WARNING) << "HTTP port: accept";
      absl::SleepFor(absl::Milliseconds(50));  // EMFILE and the like: let connections end
      continue;
    }
    absl::MutexLock lock(&mu_);
    ReapLocked();
    int serving = 0;
    for (const Connection& c : connections_) serving += c.busy ? 0 : 1;
    const bool busy = serving >= options_.max_connections;
    if (busy && static_cast<int>(connections_.size()) - serving >= kBusyAnswerers) {
      ::close(fd);  // even the answers that say so are all taken
      continue;
    }
    Connection& c = connections_.emplace_back();
    c.fd = fd;
    c.busy = busy;
    try {
      c.thread = std::thread([this, &c, fd, busy] { Serve(&c, fd, busy); });
    } catch (const std::system_error& e) {  // no thread to be had: this one is not served
      LOG(WARNING) << "HTTP port: no thread for a connection: " << e.what();
      connections_.pop_back();
      ::close(fd);
    }
  }
}

void HttpServer::Serve(Connection* c, int fd, bool busy) {
  asio::io_context io;
  beast::tcp_stream tcp_stream(io);
  beast::error_code assigned;
  (void)tcp_stream.socket().assign(impl_->protocol(), fd, assigned);
  if (assigned) LOG(WARNING) << "HTTP port: a connection's socket: " << assigned.message();
  // Whatever one connection's bytes or handler throw ends that connection, not the server.
  if (!assigned) {
    (void)CatchAll("HTTP port: a connection", [&] {
      if (!options_.tls.enabled()) {
        Session<beast::tcp_stream> session(io, tcp_stream, fd, options_, handlers_);
        busy ? session.RefuseBusy() : session.Run();
      } else if (absl::StatusOr<std::shared_ptr<ssl::context>> context = impl_->TlsContext();
                 context.ok()) {
        ssl::stream<beast::tcp_stream&> tls_stream(tcp_stream, **context);
        Session<ssl::stream<beast::tcp_stream&>> session(io, tls_stream, fd, options_, handlers_);
        if (session.Handshake()) busy ? session.RefuseBusy() : session.Run();
      }
    });
  }
  {
    absl::MutexLock lock(&mu_);
    c->fd = -1;  // Shutdown no longer touches it: the number may be reused once closed
  }
  beast::error_code ignored;
  (void)tcp_stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  (void)tcp_stream.socket().close(ignored);
  if (assigned) ::close(fd);
  c->done.store(true, std::memory_order_release);
}

}  // namespace tpserve::http
