// libFuzzer target for the HTTP request reader: a connection's bytes, fed in pieces, through
// RequestReader as the server's connections use it (heads, Content-Length and chunked
// bodies, chunk extensions, trailers, pipelined requests). Nothing may throw or crash; what
// it buffers stays within its bound; every request that comes out is within the limits;
// every refusal is 400, 413 or 431 with a message.
//
// Input: one byte choosing the piece size (how the connection's reads split the bytes), then
// the bytes, where "\xff\xfe" C L H means C repeated (L + 256 * H) * 16 times (up to about
// 1 MiB): so short inputs reach fields and lines of many KiB, past the limits, as a client
// can send them.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "server/http/request_reader.h"

namespace {

using tpserve::http::RequestLimits;
using tpserve::http::RequestReader;

constexpr size_t kMaxExpanded = 8 << 20;

std::string Expand(const uint8_t* data, size_t size) {
  std::string out;
  for (size_t i = 0; i < size && out.size() < kMaxExpanded; ++i) {
    if (i + 4 < size && data[i] == 0xff && data[i + 1] == 0xfe) {
      const size_t count = (data[i + 3] + 256u * data[i + 4]) * 16u;
      out.append(std::min(count, kMaxExpanded - out.size()), static_cast<char>(data[i + 2]));
      i += 4;
      continue;
    }
    out.push_back(static_cast<char>(data[i]));
  }
  return out;
}

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "http_request_fuzz: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr size_t kPieces[] = {1, 3, 16, 100, 1000, 4096, 16384, 1 << 20};
  const size_t piece = kPieces[data[0] % (sizeof(kPieces) / sizeof(kPieces[0]))];
  const std::string bytes = Expand(data + 1, size - 1);
  RequestLimits limits;  // the server's
  RequestReader reader(limits);
  // What may wait unparsed: a head or trailers (each up to the header limit, and a start line
  // before the fields), or a chunk-size line; plus one piece fed on top.
  const size_t bound = 2 * static_cast<size_t>(limits.max_header_bytes) + 2 * 64 + piece;
  size_t at = 0;
  int heads = 0;
  while (true) {
    const RequestReader::Progress p = reader.Parse();
    Check(reader.buffered() <= bound, "buffered past the bound");
    switch (p) {
      case RequestReader::Progress::kHead:
        ++heads;
        Check(reader.request().headers.size() <= limits.max_fields, "too many fields");
        break;
      case RequestReader::Progress::kDone:
        Check(heads > 0, "a body without a head");
        Check(reader.request().body.size() <= limits.max_body_bytes, "body past the limit");
        heads = 0;
        reader.Next();
        break;
      case RequestReader::Progress::kRefused: {
        const int status = reader.refusal().status;
        Check(status == 400 || status == 413 || status == 431, "an unexpected status");
        Check(!reader.refusal().message.empty(), "a refusal without a message");
        return 0;
      }
      case RequestReader::Progress::kMore:
        if (at >= bytes.size()) return 0;
        reader.Feed(absl::string_view(bytes).substr(at, piece));
        at += piece;
        break;
    }
  }
}
