#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve::http {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Connections the test server takes at once: more than back-to-back exchanges ever hold (a
// closed connection's slot is given back a moment after the client sees the close, so a tight
// limit made consecutive exchanges race it on a loaded machine).
constexpr int kMaxConnections = 6;

// A server whose handler echoes the body (or streams it back in three chunks for
// /stream), with small limits.
class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions options;
    options.host = "127.0.0.1";
    options.max_connections = kMaxConnections;
    options.max_body_bytes = 1000;
    options.max_header_bytes = 2000;
    options.request_timeout = absl::Milliseconds(800);
    HttpHandlers handlers;
    handlers.admit = [](const HttpRequest& head, HttpReply& reply) {
      if (head.Header("Authorization") == "no") {
        reply.Send(401, "application/json", R"({"error": "key"})");
        return false;
      }
      return true;
    };
    handlers.handle = [](const HttpRequest& request, HttpReply& reply) {
      if (request.path == "/throw") throw std::runtime_error("a handler's bug");
      if (request.path == "/stream") {
        reply.Begin(200, "text/plain", {});
        for (const char* piece : {"a", "bb", "ccc"}) reply.Write(piece);
        reply.End();
        return;
      }
      reply.Send(200, "text/plain",
                 absl::StrCat(request.method, " ", request.path, " ", request.body));
    };
    handlers.error_body = [](int status, const std::string& message) {
      return absl::StrCat(R"({"status": )", status, R"(, "message": ")", message, R"("})");
    };
    absl::StatusOr<std::unique_ptr<HttpServer>> started =
        HttpServer::Start(std::move(options), std::move(handlers));
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
  }

  int Connect() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval timeout{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    return fd;
  }

  // Sends `request` on a new connection and reads until the server closes it.
  std::string Exchange(const std::string& request) const {
    const int fd = Connect();
    (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string answer;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return answer;
  }

  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, AnswersWholeAndChunkedRequestsAndStreams) {
  EXPECT_THAT(Exchange("POST /echo?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                       "Connection: close\r\n\r\nhello"),
              AllOf(StartsWith("HTTP/1.1 200"), HasSubstr("POST /echo hello")));
  EXPECT_THAT(Exchange("POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
                       "Connection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
              HasSubstr("POST /echo abcde"));
  const std::string streamed =
      Exchange("GET /stream HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(streamed, AllOf(HasSubstr("Transfer-Encoding: chunked"), HasSubstr("1\r\na\r\n"),
                              HasSubstr("3\r\nccc\r\n"), HasSubstr("0\r\n\r\n")));
}

TEST_F(HttpServerTest, KeepsAConnectionAliveBetweenRequests) {
  const std::string two = Exchange(
      "GET /one HTTP/1.1\r\nHost: h\r\n\r\nGET /two HTTP/1.1\r\nHost: h\r\nConnection: "
      "close\r\n\r\n");
  EXPECT_THAT(two, AllOf(HasSubstr("GET /one "), HasSubstr("GET /two ")));
}

TEST_F(HttpServerTest, RefusesWhatIsOverTheLimits) {
  EXPECT_THAT(
      Exchange(absl::StrCat("POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n",
                            std::string(1001, 'x'))),
      AllOf(StartsWith("HTTP/1.1 413"), HasSubstr("body: exceeds the limit of 1000")));
  std::string chunked = "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) absl::StrAppend(&chunked, "190\r\n", std::string(400, 'x'), "\r\n");
  EXPECT_THAT(Exchange(chunked), StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(Exchange(absl::StrCat("GET / HTTP/1.1\r\nX: ", std::string(3000, 'a'), "\r\n\r\n")),
              AllOf(StartsWith("HTTP/1.1 431"), HasSubstr("headers: exceed the limit of 2000")));
  EXPECT_THAT(Exchange("POST /echo HTTP/1.1\r\nHost: h\r\nContent-Encoding: gzip\r\n"
                       "Content-Length: 3\r\n\r\nabc"),
              AllOf(StartsWith("HTTP/1.1 415"), HasSubstr("Content-Encoding")));
  EXPECT_THAT(Exchange("nonsense\r\n\r\n"), StartsWith("HTTP/1.1 400"));
}

// Issue 37: a 70,000-byte trailer field made Beast throw out of the connection's thread,
// which aborted the server. Now: 431, and the server goes on serving.
TEST_F(HttpServerTest, AnOverlongTrailerIsRefusedAndTheServerServesOn) {
  EXPECT_THAT(Exchange(absl::StrCat("POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: "
                                    "chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: ",
                                    std::string(70000, 'a'), "\r\n\r\n")),
              AllOf(StartsWith("HTTP/1.1 431"), HasSubstr("trailers: exceed the limit of 2000")));
  EXPECT_THAT(Exchange("GET /after HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"),
              AllOf(StartsWith("HTTP/1.1 200"), HasSubstr("GET /after")));
}

TEST_F(HttpServerTest, AHandlerThatThrowsEndsItsConnectionOnly) {
  EXPECT_EQ(Exchange("GET /throw HTTP/1.1\r\nHost: h\r\n\r\n"), "");
  EXPECT_THAT(Exchange("GET /after HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"),
              StartsWith("HTTP/1.1 200"));
}

TEST_F(HttpServerTest, RefusesAmbiguousFraming) {
  EXPECT_THAT(Exchange("POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
              AllOf(StartsWith("HTTP/1.1 400"), HasSubstr("Transfer-Encoding")));
  EXPECT_THAT(Exchange("POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "10000000000000001\r\nabc\r\n0\r\n\r\n"),
              AllOf(StartsWith("HTTP/1.1 400"), HasSubstr("chunked body")));
}

TEST_F(HttpServerTest, AdmitRefusesBeforeTheBodyIsRead) {
  // The body is announced and never sent: waiting for it would end in 408, not 401.
  EXPECT_THAT(Exchange("POST /echo HTTP/1.1\r\nHost: h\r\nAuthorization: no\r\n"
                       "Content-Length: 900\r\n\r\n"),
              StartsWith("HTTP/1.1 401"));
}

TEST_F(HttpServerTest, ARequestMustArriveWithinTheDeadlineWhateverItsPace) {
  const int fd = Connect();
  const absl::Time start = absl::Now();
  bool closed = false;
  for (int i = 0; i < 30 && !closed; ++i) {  // a byte every 100 ms, never the end of the head
    closed = ::send(fd, "X", 1, MSG_NOSIGNAL) < 0;
    char c;
    closed = closed || ::recv(fd, &c, 1, MSG_DONTWAIT) == 0;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(2000));
}

TEST_F(HttpServerTest, ConnectionsOverTheLimitAreAnswered503) {
  std::vector<int> held;
  for (int i = 0; i < kMaxConnections; ++i) held.push_back(Connect());
  absl::SleepFor(absl::Milliseconds(100));  // all taken by the server
  EXPECT_THAT(Exchange("GET / HTTP/1.1\r\nHost: h\r\n\r\n"),
              AllOf(StartsWith("HTTP/1.1 503"),
                    HasSubstr(absl::StrCat("at most ", kMaxConnections, " at once"))));
  for (int fd : held) ::close(fd);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_THAT(Exchange("GET /again HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"),
              HasSubstr("GET /again"));
}

TEST_F(HttpServerTest, ShutdownClosesOpenConnections) {
  const int idle = Connect();
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  char c;
  EXPECT_EQ(::recv(idle, &c, 1, 0), 0);
  ::close(idle);
}

}  // namespace
}  // namespace tpserve::http
