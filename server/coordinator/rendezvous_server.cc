#include "server/coordinator/rendezvous_server.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tpserve::coordinator {

using tpserve::v1::StoreReply;
using tpserve::v1::StoreRequest;

namespace {

// The values exchanged are addresses and identifiers of a few hundred bytes.
constexpr size_t kMaxKeyBytes = 1024;
constexpr size_t kMaxValueBytes = 64 * 1024;
constexpr int kMaxKeysPerWait = 4096;
constexpr uint32_t kMaxTimeoutMs = 10 * 60 * 1000;
constexpr size_t kMaxBlocking = 256;  // GETs and WAITs in flight, all workers together

// Slice of a blocking operation between checks for Close.
constexpr absl::Duration kSlice = absl::Milliseconds(50);

absl::Status TooLarge(absl::string_view what, size_t size, size_t limit) {
  return absl::InvalidArgumentError(
      absl::StrCat("StoreRequest: ", what, " of ", size, " is above ", limit));
}

}  // namespace

absl::Status CheckStoreRequest(const StoreRequest& request) {
  if (request.key().size() > kMaxKeyBytes) {
    return TooLarge("key bytes", request.key().size(), kMaxKeyBytes);
  }
  if (request.value().size() > kMaxValueBytes) {
    return TooLarge("value bytes", request.value().size(), kMaxValueBytes);
  }
  if (request.keys_size() > kMaxKeysPerWait) {
    return TooLarge("keys", request.keys_size(), kMaxKeysPerWait);
  }
  for (const std::string& key : request.keys()) {
    if (key.size() > kMaxKeyBytes) return TooLarge("key bytes", key.size(), kMaxKeyBytes);
  }
  if (request.timeout_ms() > kMaxTimeoutMs) {
    return TooLarge("timeout_ms", request.timeout_ms(), kMaxTimeoutMs);
  }
  return absl::OkStatus();
}

RendezvousServer::~RendezvousServer() { Close(""); }

void RendezvousServer::Open() {
  absl::MutexLock lock(&mu_);
  closed_ = false;
}

void RendezvousServer::Close(const std::string& erase_prefix) {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
  if (!erase_prefix.empty()) store_.EraseWithPrefix(erase_prefix);
}

void RendezvousServer::Serve(const StoreRequest& request, Reply reply) {
  StoreReply out;
  out.set_id(request.id());
  if (absl::Status valid = CheckStoreRequest(request); !valid.ok()) {
    out.set_error(std::string{valid.message()});
    reply(std::move(out));
    return;
  }
  switch (request.op()) {
    case StoreRequest::OP_SET:
      if (absl::Status st = store_.Set(request.key(), request.value()); !st.ok()) {
        out.set_error(st.ToString());
      }
      break;
    case StoreRequest::OP_ADD: {
      int64_t delta = 0;
      if (!absl::SimpleAtoi(request.value(), &delta)) {
        out.set_error(absl::StrCat("ADD: '", request.value(), "' is not an integer"));
        break;
      }
      absl::StatusOr<int64_t> value = store_.Add(request.key(), delta);
      if (value.ok()) {
        out.set_value(absl::StrCat(*value));
      } else {
        out.set_error(value.status().ToString());
      }
      break;
    }
    case StoreRequest::OP_GET:
    case StoreRequest::OP_WAIT: {
      absl::MutexLock lock(&mu_);
      if (closed_) {
        out.set_error("the coordinator is tearing the world down");
        break;
      }
      if (blocking_ >= kMaxBlocking) {
        out.set_error(absl::StrCat("StoreRequest: more than ", kMaxBlocking,
                                   " blocking operations in flight"));
        break;
      }
      ++blocking_;
      threads_.emplace_back([this, request, reply = std::move(reply)] {
        reply(Blocking(request));
        absl::MutexLock lock(&mu_);
        --blocking_;
      });
      return;
    }
    default:
      out.set_error(absl::StrCat("unknown store op ", request.op()));
      break;
  }
  reply(std::move(out));
}

StoreReply RendezvousServer::Blocking(const StoreRequest& request) {
  StoreReply reply;
  reply.set_id(request.id());
  const absl::Time deadline = absl::Now() + absl::Milliseconds(request.timeout_ms());
  while (true) {
    const absl::Duration slice =
        std::max(std::min(kSlice, deadline - absl::Now()), absl::ZeroDuration());
    absl::Status status;
    if (request.op() == StoreRequest::OP_GET) {
      absl::StatusOr<std::string> value = store_.Get(request.key(), slice);
      if (value.ok()) reply.set_value(*value);
      status = value.status();
    } else {
      status = store_.Wait({request.keys().begin(), request.keys().end()}, slice);
    }
    if (status.ok()) return reply;
    if (!absl::IsDeadlineExceeded(status) || absl::Now() >= deadline) {
      reply.set_error(status.ToString());
      return reply;
    }
    absl::MutexLock lock(&mu_);
    if (closed_) {
      reply.set_error("the coordinator is tearing the world down");
      return reply;
    }
  }
}

}  // namespace tpserve::coordinator
