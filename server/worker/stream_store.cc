#include "server/worker/stream_store.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve::worker {

using tpserve::v1::StoreReply;
using tpserve::v1::StoreRequest;

namespace {

uint32_t Millis(absl::Duration d) {
  const int64_t ms = absl::ToInt64Milliseconds(d);
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 0, UINT32_MAX));
}

}  // namespace

StreamStore::StreamStore(SendFn send, absl::Duration op_timeout)
    : send_(std::move(send)), op_timeout_(op_timeout) {}

absl::StatusOr<StoreReply> StreamStore::Call(StoreRequest request, absl::Duration timeout) {
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return closed_;
    id = next_id_++;
    pending_[id] = std::nullopt;
  }
  request.set_id(id);
  if (absl::Status sent = send_(request); !sent.ok()) {
    absl::MutexLock lock(&mu_);
    pending_.erase(id);
    return sent;
  }
  absl::MutexLock lock(&mu_);
  auto arrived = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !closed_.ok() || pending_.at(id).has_value();
  };
  mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
  std::optional<StoreReply> reply = std::move(pending_.at(id));
  pending_.erase(id);
  if (reply.has_value()) {
    if (!reply->error().empty()) {
      // The coordinator's store reports a missing key after its timeout.
      return absl::DeadlineExceededError(absl::StrCat("store ", StoreRequest::Op_Name(request.op()),
                                                      " '", request.key(), "': ", reply->error()));
    }
    return *std::move(reply);
  }
  if (!closed_.ok()) return closed_;
  return absl::DeadlineExceededError(absl::StrCat("store ", StoreRequest::Op_Name(request.op()),
                                                  " '", request.key(), "': no reply within ",
                                                  absl::FormatDuration(timeout)));
}

absl::Status StreamStore::Set(const std::string& key, const std::string& value) {
  StoreRequest request;
  request.set_op(StoreRequest::OP_SET);
  request.set_key(key);
  request.set_value(value);
  return Call(std::move(request), op_timeout_).status();
}

absl::StatusOr<std::string> StreamStore::Get(const std::string& key, absl::Duration timeout) {
  StoreRequest request;
  request.set_op(StoreRequest::OP_GET);
  request.set_key(key);
  request.set_timeout_ms(Millis(timeout));
  absl::StatusOr<StoreReply> reply = Call(std::move(request), timeout + op_timeout_);
  if (!reply.ok()) return reply.status();
  return std::string(reply->value());
}

absl::Status StreamStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  StoreRequest request;
  request.set_op(StoreRequest::OP_WAIT);
  for (const std::string& key : keys) request.add_keys(key);
  request.set_key(absl::StrJoin(keys, ","));  // for messages only
  request.set_timeout_ms(Millis(timeout));
  return Call(std::move(request), timeout + op_timeout_).status();
}

absl::StatusOr<int64_t> StreamStore::Add(const std::string& key, int64_t delta) {
  StoreRequest request;
  request.set_op(StoreRequest::OP_ADD);
  request.set_key(key);
  request.set_value(absl::StrCat(delta));
  absl::StatusOr<StoreReply> reply = Call(std::move(request), op_timeout_);
  if (!reply.ok()) return reply.status();
  int64_t value = 0;
  if (!absl::SimpleAtoi(reply->value(), &value)) {
    return absl::InternalError(
        absl::StrCat("store ADD '", key, "': reply '", reply->value(), "' is not an integer"));
  }
  return value;
}

void StreamStore::Deliver(const StoreReply& reply) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(reply.id());
  if (it != pending_.end()) it->second = reply;
}

void StreamStore::Close(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  if (closed_.ok()) {
    closed_ = reason.ok() ? absl::CancelledError("store closed") : reason;
  }
}

}  // namespace tpserve::worker
