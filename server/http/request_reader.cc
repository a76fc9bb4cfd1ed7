#include "server/http/request_reader.h"

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

// What a chunk-size line may hold besides its extensions: the size (leading zeros allowed),
// whitespace and the line ends.
constexpr size_t kChunkLineSlack = 64;

}  // namespace

// Beast's request parser, storing into the reader's HttpRequest and counting what the
// reader bounds; a bound passed sets the reader's refusal and stops the parse.
class RequestReader::Parser final : public bhttp::basic_parser<true> {
 public:
  explicit Parser(RequestReader& reader) : r_(reader) {
    header_limit(reader.limits_.max_header_bytes);
    body_limit(reader.limits_.max_body_bytes);
  }

 private:
  // Stops the parse with `status`; the reader answers it.
  void Stop(beast::error_code& ec, int status, std::string message) {
    r_.refused_ = true;
    r_.refusal_ = {status, std::move(message)};
    ec = bhttp::error::bad_field;  // any error: the reader reads the refusal
  }

  void on_request_impl(bhttp::verb, beast::string_view method, beast::string_view target,
                       int version, beast::error_code&) override {
    r_.request_.method.assign(method.data(), method.size());
    const beast::string_view path = target.substr(0, target.find('?'));
    r_.request_.path.assign(path.data(), path.size());
  }

  void on_response_impl(int, beast::string_view, int, beast::error_code& ec) override {
    ec = bhttp::error::bad_method;  // never called for a request parser
  }

  void on_field_impl(bhttp::field field, beast::string_view name, beast::string_view value,
                     beast::error_code& ec) override {
    const uint32_t max = r_.limits_.max_fields;
    if (!is_header_done()) {
      if (++r_.head_fields_ > max) {
        return Stop(ec, 431, absl::StrCat("headers: more than ", max, " fields"));
      }
      // Beast refuses two that differ; even two alike are refused (a proxy may differ).
      if (field == bhttp::field::content_length && seen_length_) {
        return Stop(ec, 400, "Content-Length: sent twice");
      }
      seen_length_ = seen_length_ || field == bhttp::field::content_length;
      r_.request_.headers.emplace_back(std::string(name.data(), name.size()),
                                       std::string(value.data(), value.size()));
      return;
    }
    // A trailer: counted, not kept (the head went to the handlers before the body came).
    if (++r_.trailer_fields_ > max) {
      return Stop(ec, 431, absl::StrCat("trailers: more than ", max, " fields"));
    }
    // Bounded as they wait whole too (Overlong), so whatever the pace of their arrival.
    trailer_bytes_ += name.size() + value.size() + 4;  // "name: value\r\n"
    if (trailer_bytes_ > r_.limits_.max_header_bytes) {
      Stop(ec, 431,
           absl::StrCat("trailers: exceed the limit of ", r_.limits_.max_header_bytes, " bytes"));
    }
  }

  void on_header_impl(beast::error_code&) override {}

  void on_body_init_impl(const boost::optional<std::uint64_t>& length,
                         beast::error_code&) override {
    // Within max_body_bytes: Beast refuses a longer Content-Length before this.
    if (length) r_.request_.body.reserve(*length);
  }

  size_t on_body_impl(beast::string_view body, beast::error_code&) override {
    r_.request_.body.append(body.data(), body.size());
    return body.size();
  }

  void on_chunk_header_impl(std::uint64_t, beast::string_view extensions,
                            beast::error_code& ec) override {
    ++r_.chunks_;
    r_.extension_bytes_ += extensions.size();
    if (r_.extension_bytes_ > r_.limits_.max_chunk_extension_bytes) {
      Stop(ec, 400,
           absl::StrCat("chunk extensions: exceed the limit of ",
                        r_.limits_.max_chunk_extension_bytes, " bytes in one request"));
    }
  }

  size_t on_chunk_body_impl(std::uint64_t, beast::string_view body, beast::error_code&) override {
    r_.request_.body.append(body.data(), body.size());
    return body.size();
  }

  void on_finish_impl(beast::error_code&) override {}

  RequestReader& r_;
  bool seen_length_ = false;
  uint64_t trailer_bytes_ = 0;
};

RequestReader::RequestReader(const RequestLimits& limits)
    : limits_(limits), parser_(std::make_unique<Parser>(*this)) {}

RequestReader::~RequestReader() = default;

void RequestReader::Feed(absl::string_view bytes) { pending_.append(bytes.data(), bytes.size()); }

bool RequestReader::keep_alive() const { return parser_->keep_alive(); }

bool RequestReader::got_some() const { return parser_->got_some() || !pending_.empty(); }

void RequestReader::Next() {
  parser_ = std::make_unique<Parser>(*this);
  request_ = HttpRequest();
  head_told_ = false;
  refused_ = false;
  refusal_ = Refusal();
  head_fields_ = 0;
  trailer_fields_ = 0;
  extension_bytes_ = 0;
  chunks_ = 0;
}

RequestReader::Progress RequestReader::Refuse(int status, std::string message) {
  refused_ = true;
  refusal_ = {status, std::move(message)};
  return Progress::kRefused;
}

RequestReader::Progress RequestReader::Parse() {
  while (!refused_) {
    if (parser_->is_header_done() && !head_told_) {
      head_told_ = true;
      parser_->eager(true);  // the body, as far as it has come, in one call
      return Progress::kHead;
    }
    if (parser_->is_done()) return Progress::kDone;
    if (pending_.empty()) return Progress::kMore;
    beast::error_code ec;
    size_t used = 0;
    try {
      used = parser_->put(boost::asio::const_buffer(pending_.data(), pending_.size()), ec);
    } catch (const std::exception& e) {  // an allocation; nothing of Beast's throws here
      return Refuse(400, absl::StrCat("request: cannot be read (", e.what(), ")"));
    }
    pending_.erase(0, used);
    if (refused_) break;  // a bound the parser counts
    if (ec == bhttp::error::need_more) return Overlong() ? Progress::kRefused : Progress::kMore;
    if (ec == bhttp::error::header_limit) {
      return Refuse(
          431, absl::StrCat("headers: exceed the limit of ", limits_.max_header_bytes, " bytes"));
    }
    if (ec == bhttp::error::body_limit) {
      return Refuse(413,
                    absl::StrCat("body: exceeds the limit of ", limits_.max_body_bytes, " bytes"));
    }
    if (ec == bhttp::error::bad_content_length) {
      return Refuse(400,
                    "Content-Length: malformed, repeated with another value, or sent with "
                    "Transfer-Encoding: chunked");
    }
    if (ec == bhttp::error::bad_transfer_encoding) {
      return Refuse(400, "Transfer-Encoding: repeated, or sent with Content-Length");
    }
    if (ec == bhttp::error::bad_chunk) {
      return Refuse(400, "chunked body: a malformed chunk (its size is hex and fits 64 bits)");
    }
    if (ec == bhttp::error::bad_chunk_extension) {
      return Refuse(400, "chunked body: a malformed chunk extension");
    }
    if (ec) return Refuse(400, absl::StrCat("request: malformed HTTP (", ec.message(), ")"));
    if (used == 0) return Progress::kMore;  // defensive: no progress without more bytes
  }
  return Progress::kRefused;
}

bool RequestReader::Overlong() {
  // The head: Beast keeps its limit (header_limit), with what is buffered at most one read
  // past it. A Content-Length body is taken as it comes, so nothing waits.
  if (!parser_->is_header_done() || !parser_->chunked()) return false;
  // A chunked body waits for a whole chunk-size line, or for the whole trailer section.
  // After the CRLF that ends a chunk's data comes the next chunk-size line.
  size_t line_start = 0;
  if (chunks_ > 0 && pending_.size() >= 2 && pending_.compare(0, 2, "\r\n") == 0) line_start = 2;
  const size_t line_end = pending_.find("\r\n", line_start);
  const uint64_t extension_room =
      limits_.max_chunk_extension_bytes -
      std::min<uint64_t>(extension_bytes_, limits_.max_chunk_extension_bytes);
  if (line_end == std::string::npos) {
    if (pending_.size() - line_start <= extension_room + kChunkLineSlack) return false;
    Refuse(400, absl::StrCat("chunk extensions: exceed the limit of ",
                             limits_.max_chunk_extension_bytes, " bytes in one request"));
    return true;
  }
  // A whole line Beast did not take is the last chunk's ("0"): the trailers follow it.
  if (pending_.size() - (line_end + 2) <= limits_.max_header_bytes) return false;
  Refuse(431, absl::StrCat("trailers: exceed the limit of ", limits_.max_header_bytes, " bytes"));
  return true;
}

}  // namespace tpserve::http
