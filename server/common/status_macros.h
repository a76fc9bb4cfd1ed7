// Early-return helpers for absl::Status / absl::StatusOr. Header-only; no state.
#ifndef TPSERVE_SERVER_COMMON_STATUS_MACROS_H_
#define TPSERVE_SERVER_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TPSERVE_STATUS_CONCAT_INNER_(a, b) a##b
#define TPSERVE_STATUS_CONCAT_(a, b) TPSERVE_STATUS_CONCAT_INNER_(a, b)

// Returns `expr`'s status from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)  \
  do {                         \
    absl::Status _st = (expr); \
    if (!_st.ok()) return _st; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates the StatusOr `expr`; returns its status when not
// OK, else moves its value into `lhs` (which may be a declaration).
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(TPSERVE_STATUS_CONCAT_(_status_or_, __LINE__), lhs, expr)
// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` may be a declaration.
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // TPSERVE_SERVER_COMMON_STATUS_MACROS_H_
