#include "server/coordinator/rendezvous_server.h"

#include <algorithm>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/common/catch_all.h"
#include "server/protocol/store_codec.h"

namespace tpserve::coordinator {

using tpserve::v1::StoreRequest;

namespace {

constexpr size_t kMaxBlocking = 256;  // GETs and WAITs in flight, all workers together

// Slice of a blocking operation between checks for Close.
constexpr absl::Duration kSlice = absl::Milliseconds(50);

}  // namespace

RendezvousServer::~RendezvousServer() { Close(""); }

void RendezvousServer::Open() {
  absl::MutexLock lock(&mu_);
  closed_ = false;
}

void RendezvousServer::Close(const std::string& erase_prefix) {
  std::list<Blocker> blockers;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    blockers.splice(blockers.end(), blockers_);  // nodes stay put: each thread's `done`
  }
  for (Blocker& b : blockers) b.thread.join();
  if (!erase_prefix.empty()) store_.EraseWithPrefix(erase_prefix);
}

void RendezvousServer::Serve(const StoreRequest& request, Reply reply) {
  const uint64_t id = request.id();
  absl::StatusOr<protocol::StoreOp> op = protocol::DecodeStoreRequest(request);
  if (!op.ok()) {
    reply(protocol::EncodeStoreReply(id, op.status()));
    return;
  }
  absl::StatusOr<std::string> outcome;
  switch (op->op) {
    case StoreRequest::OP_SET:
      if (absl::Status st = store_.Set(op->key, op->value); st.ok()) {
        outcome = "";
      } else {
        outcome = st;
      }
      break;
    case StoreRequest::OP_ADD: {
      absl::StatusOr<int64_t> value = store_.Add(op->key, op->delta);
      if (value.ok()) {
        outcome = absl::StrCat(*value);
      } else {
        outcome = value.status();
      }
      break;
    }
    default: {  // GET, WAIT
      absl::MutexLock lock(&mu_);
      if (closed_) {
        outcome = absl::UnavailableError("the coordinator is tearing the world down");
        break;
      }
      if (blocking_ >= kMaxBlocking) {
        outcome = absl::ResourceExhaustedError(absl::StrCat(
            "StoreRequest: more than ", kMaxBlocking, " blocking operations in flight"));
        break;
      }
      ReapLocked();
      Blocker& blocker = blockers_.emplace_back();
      auto answer = std::make_shared<Reply>(std::move(reply));  // kept if no thread is had
      try {
        blocker.thread = std::thread([this, &blocker, id, op = *std::move(op), answer] {
          absl::StatusOr<std::string> outcome = absl::InternalError("StoreRequest: not run");
          const absl::Status ran = CatchAll("StoreRequest", [&] { outcome = Blocking(op); });
          if (!ran.ok()) outcome = ran;
          (*answer)(protocol::EncodeStoreReply(id, outcome));
          absl::MutexLock lock(&mu_);
          --blocking_;
          blocker.done = true;
        });
      } catch (const std::system_error& e) {  // no thread to be had: refused, not fatal
        blockers_.pop_back();
        (*answer)(protocol::EncodeStoreReply(
            id, absl::ResourceExhaustedError(
                    absl::StrCat("StoreRequest: no thread for a blocking operation: ", e.what()))));
        return;
      }
      ++blocking_;
      return;
    }
  }
  reply(protocol::EncodeStoreReply(id, outcome));
}

void RendezvousServer::ReapLocked() {
  for (auto it = blockers_.begin(); it != blockers_.end();) {
    if (it->done) {
      it->thread.join();  // it has answered and released mu_; it only returns now
      it = blockers_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<std::string> RendezvousServer::Blocking(const protocol::StoreOp& op) {
  const absl::Time deadline = absl::Now() + op.timeout;
  while (true) {
    const absl::Duration slice =
        std::max(std::min(kSlice, deadline - absl::Now()), absl::ZeroDuration());
    absl::StatusOr<std::string> outcome;
    if (op.op == StoreRequest::OP_GET) {
      outcome = store_.Get(op.key, slice);
    } else if (absl::Status waited = store_.Wait(op.keys, slice); waited.ok()) {
      outcome = "";
    } else {
      outcome = waited;
    }
    if (outcome.ok()) return outcome;
    if (!absl::IsDeadlineExceeded(outcome.status()) || absl::Now() >= deadline) return outcome;
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("the coordinator is tearing the world down");
  }
}

}  // namespace tpserve::coordinator
