// HttpRequest: one HTTP request as the server's handlers see it.
#ifndef TPSERVE_SERVER_HTTP_HTTP_REQUEST_H_
#define TPSERVE_SERVER_HTTP_HTTP_REQUEST_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace tpserve::http {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target, less any query
  HeaderList headers;  // as received
  std::string body;    // empty until admitted and read
  // The value of header `name` (case-insensitive), "" when absent.
  std::string Header(absl::string_view name) const;
};

}  // namespace tpserve::http

#endif  // TPSERVE_SERVER_HTTP_HTTP_REQUEST_H_
