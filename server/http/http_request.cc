#include "server/http/http_request.h"

#include "absl/strings/match.h"

namespace tpserve::http {

std::string HttpRequest::Header(absl::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (absl::EqualsIgnoreCase(n, name)) return v;
  }
  return "";
}

}  // namespace tpserve::http
