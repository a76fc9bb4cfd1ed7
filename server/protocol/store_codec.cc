#include "server/protocol/store_codec.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tpserve::protocol {

using tpserve::v1::StoreReply;
using tpserve::v1::StoreRequest;

namespace {

absl::Status TooLarge(absl::string_view what, size_t size, size_t limit) {
  return absl::InvalidArgumentError(
      absl::StrCat("StoreRequest: ", what, " of ", size, " is above ", limit));
}

uint32_t Millis(absl::Duration d) {
  const int64_t ms = absl::ToInt64Milliseconds(d);
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 0, UINT32_MAX));
}

}  // namespace

StoreOp StoreOp::Set(std::string key, std::string value) {
  StoreOp op;
  op.op = StoreRequest::OP_SET;
  op.key = std::move(key);
  op.value = std::move(value);
  return op;
}

StoreOp StoreOp::Get(std::string key, absl::Duration timeout) {
  StoreOp op;
  op.op = StoreRequest::OP_GET;
  op.key = std::move(key);
  op.timeout = timeout;
  return op;
}

StoreOp StoreOp::Wait(std::vector<std::string> keys, absl::Duration timeout) {
  StoreOp op;
  op.op = StoreRequest::OP_WAIT;
  // For messages only: the first key and how many more, within the key limit (all of them
  // joined would outgrow it in a large world).
  if (!keys.empty()) {
    op.key = keys.size() == 1 ? keys.front()
                              : absl::StrCat(keys.front(), " and ", keys.size() - 1, " more");
    if (op.key.size() > kMaxStoreKeyBytes) op.key.resize(kMaxStoreKeyBytes);
  }
  op.keys = std::move(keys);
  op.timeout = timeout;
  return op;
}

StoreOp StoreOp::Add(std::string key, int64_t delta) {
  StoreOp op;
  op.op = StoreRequest::OP_ADD;
  op.key = std::move(key);
  op.delta = delta;
  return op;
}

StoreRequest EncodeStoreRequest(uint64_t id, const StoreOp& op) {
  StoreRequest request;
  request.set_id(id);
  request.set_op(op.op);
  request.set_key(op.key);
  if (op.op == StoreRequest::OP_SET) request.set_value(op.value);
  if (op.op == StoreRequest::OP_ADD) request.set_value(absl::StrCat(op.delta));
  for (const std::string& key : op.keys) request.add_keys(key);
  if (op.op == StoreRequest::OP_GET || op.op == StoreRequest::OP_WAIT) {
    request.set_timeout_ms(Millis(op.timeout));
  }
  return request;
}

absl::StatusOr<StoreOp> DecodeStoreRequest(const StoreRequest& request) {
  if (request.key().size() > kMaxStoreKeyBytes) {
    return TooLarge("key bytes", request.key().size(), kMaxStoreKeyBytes);
  }
  if (request.value().size() > kMaxStoreValueBytes) {
    return TooLarge("value bytes", request.value().size(), kMaxStoreValueBytes);
  }
  if (request.keys_size() > kMaxStoreWaitKeys) {
    return TooLarge("keys", request.keys_size(), kMaxStoreWaitKeys);
  }
  for (const std::string& key : request.keys()) {
    if (key.size() > kMaxStoreKeyBytes) return TooLarge("key bytes", key.size(), kMaxStoreKeyBytes);
  }
  const auto max_ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(kMaxStoreTimeout));
  if (request.timeout_ms() > max_ms) return TooLarge("timeout_ms", request.timeout_ms(), max_ms);
  StoreOp op;
  op.op = request.op();
  op.key = request.key();
  op.timeout = absl::Milliseconds(request.timeout_ms());
  switch (request.op()) {
    case StoreRequest::OP_SET:
      op.value = request.value();
      break;
    case StoreRequest::OP_ADD:
      if (!absl::SimpleAtoi(request.value(), &op.delta)) {
        return absl::InvalidArgumentError(
            absl::StrCat("StoreRequest: ADD value '", request.value(), "' is not an integer"));
      }
      break;
    case StoreRequest::OP_WAIT:
      op.keys.assign(request.keys().begin(), request.keys().end());
      break;
    case StoreRequest::OP_GET:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("StoreRequest: unknown op ", request.op()));
  }
  return op;
}

StoreReply EncodeStoreReply(uint64_t id, const absl::StatusOr<std::string>& outcome) {
  StoreReply reply;
  reply.set_id(id);
  if (outcome.ok()) {
    reply.set_value(*outcome);
  } else {
    reply.set_error(std::string{outcome.status().message()});
  }
  return reply;
}

}  // namespace tpserve::protocol
