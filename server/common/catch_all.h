// CatchAll: the one rule for what a thread does with an exception its work throws (a bug, or
// an allocation that failed). Uncaught, it would end the whole process (std::terminate), so
// every thread that serves a client or a peer runs its unit of work — a connection, a step
// loop's turn, a peer's stream — through CatchAll, which logs it and hands it back as an
// Internal status for that unit alone to end on.
#ifndef TPSERVE_SERVER_COMMON_CATCH_ALL_H_
#define TPSERVE_SERVER_COMMON_CATCH_ALL_H_

#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "glog/logging.h"

namespace tpserve {

// Runs `work()`; OK, or Internal naming `what` and the exception it ended on (logged).
template <class Work>
absl::Status CatchAll(absl::string_view what, Work&& work) noexcept {
  std::string why;
  try {
    std::forward<Work>(work)();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
    why = "an exception of unknown type";
  }
  LOG(ERROR) << what << ": ended on an exception: " << why;
  return absl::InternalError(absl::StrCat(what, ": ended on an exception: ", why));
}

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_CATCH_ALL_H_
