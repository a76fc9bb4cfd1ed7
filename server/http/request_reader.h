// RequestReader: the bytes of one HTTP/1.1 connection, as they arrive, made into requests one
// at a time, on Beast's parser (Debian's libboost-dev) with the bounds a public port needs
// and that Beast alone does not keep:
// - the head (request line and fields) is at most `max_header_bytes` (431);
// - the trailers of a chunked body are at most `max_header_bytes` of their own, counted
//   apart from the head (431): Beast would buffer them without end, and throw on a field
//   past 64 KiB;
// - the head, and the trailers, hold at most `max_fields` fields each (431);
// - a request's chunk extensions, all its chunks together, are at most
//   `max_chunk_extension_bytes`, and one chunk-size line at most that plus a little (400);
// - the body is at most `max_body_bytes`, by Content-Length or chunked (413);
// - a Content-Length with a Transfer-Encoding, a repeated Content-Length or
//   Transfer-Encoding, or a chunk size past 64 bits is refused (400): the framing is never
//   guessed (request smuggling).
// So what it buffers of a request that is not yet whole stays under about
// 2 * max_header_bytes, whatever is sent; nothing it is fed throws out of it. It does no
// I/O: the connection reads, feeds it, and asks what it has. Pipelined requests come out in
// turn: bytes fed past the end of one are the start of the next. Not thread-safe (one per
// connection).
#ifndef TPSERVE_SERVER_HTTP_REQUEST_READER_H_
#define TPSERVE_SERVER_HTTP_REQUEST_READER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "server/http/http_request.h"

namespace tpserve::http {

struct RequestLimits {
  uint32_t max_header_bytes = 16 << 10;  // the head; and the trailers, apart
  uint64_t max_body_bytes = 4 << 20;
  uint32_t max_fields = 100;                     // in the head; and in the trailers
  uint32_t max_chunk_extension_bytes = 4 << 10;  // one request's, all its chunks together
};

// An answer the server gives by itself to what it was sent; the connection then closes.
struct Refusal {
  int status = 400;
  std::string message;  // names the field or the part, and the limit
};

class RequestReader {
 public:
  enum class Progress {
    kMore,     // feed it more bytes
    kHead,     // the head is whole: request() has all but the body (call Parse to go on)
    kDone,     // the request is whole: request() has its body
    kRefused,  // refusal() says why; feed it nothing more
  };

  explicit RequestReader(const RequestLimits& limits);
  ~RequestReader();

  // Bytes read from the connection, to be parsed by the next Parse. Feed only after kMore.
  void Feed(absl::string_view bytes);
  // Parses what it has been fed. kHead comes once per request, before any of its body is
  // parsed; then kMore until kDone (or kRefused).
  Progress Parse();
  // After kDone: starts on the next request, with whatever was fed past the last.
  void Next();

  HttpRequest& request() { return request_; }
  // Whether the connection may carry another request after this one (HTTP/1.1, or 1.0 with
  // keep-alive; no "Connection: close"). Valid from kHead.
  bool keep_alive() const;
  // Whether any byte of the current request has come (so a close now cuts it short).
  bool got_some() const;
  const Refusal& refusal() const { return refusal_; }
  // Bytes fed and not yet parsed (for the bound above).
  size_t buffered() const { return pending_.size(); }

 private:
  class Parser;
  friend class Parser;

  // Whether what is buffered of the current part is past its bound; sets refusal_ if so.
  bool Overlong();
  Progress Refuse(int status, std::string message);

  const RequestLimits limits_;
  std::unique_ptr<Parser> parser_;
  HttpRequest request_;
  std::string pending_;  // fed, not yet parsed
  bool head_told_ = false;
  bool refused_ = false;
  Refusal refusal_;
  // Counted by the parser as it goes.
  uint32_t head_fields_ = 0;
  uint32_t trailer_fields_ = 0;
  uint64_t extension_bytes_ = 0;
  uint64_t chunks_ = 0;
};

}  // namespace tpserve::http

#endif  // TPSERVE_SERVER_HTTP_REQUEST_READER_H_
