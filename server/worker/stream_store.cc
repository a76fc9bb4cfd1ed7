#include "server/worker/stream_store.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tpserve::worker {

using tpserve::v1::StoreReply;
using tpserve::v1::StoreRequest;

StreamStore::StreamStore(SendFn send, absl::Duration op_timeout)
    : send_(std::move(send)), op_timeout_(op_timeout) {}

absl::StatusOr<StoreReply> StreamStore::Call(const protocol::StoreOp& op, absl::Duration timeout) {
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return closed_;
    id = next_id_++;
    pending_[id] = std::nullopt;
  }
  const StoreRequest request = protocol::EncodeStoreRequest(id, op);
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
  return Call(protocol::StoreOp::Set(key, value), op_timeout_).status();
}

absl::StatusOr<std::string> StreamStore::Get(const std::string& key, absl::Duration timeout) {
  absl::StatusOr<StoreReply> reply =
      Call(protocol::StoreOp::Get(key, timeout), timeout + op_timeout_);
  if (!reply.ok()) return reply.status();
  return std::string(reply->value());
}

absl::Status StreamStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  return Call(protocol::StoreOp::Wait(keys, timeout), timeout + op_timeout_).status();
}

absl::StatusOr<int64_t> StreamStore::Add(const std::string& key, int64_t delta) {
  absl::StatusOr<StoreReply> reply = Call(protocol::StoreOp::Add(key, delta), op_timeout_);
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
