#include "server/comm/gloo_communicator.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <typeinfo>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/attr.h"
#include "gloo/transport/tcp/device.h"

namespace tpserve::comm {
namespace {

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Gloo's rendezvous::Store over a tpserve Store, every key under `prefix`. Gloo's store API
// reports failure only by throwing, so a failure throws gloo::IoException and remembers its
// Status, which CreateGlooCommunicator returns once connectFullMesh has unwound. Used by the
// creating thread only.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(comm::Store* store, std::string prefix, absl::Duration timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_->Set(prefix_ + key, std::string(data.begin(), data.end())));
  }

  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value = store_->Get(prefix_ + key, timeout_);
    Check(value.status());
    return std::vector<char>(value->begin(), value->end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, ToMillis(timeout_)); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    prefixed.reserve(keys.size());
    for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
    // Gloo passes kNoTimeout (0) for "unbounded": we never wait past our own bound.
    const absl::Duration bound =
        timeout.count() > 0 ? std::min(absl::FromChrono(timeout), timeout_) : timeout_;
    Check(store_->Wait(prefixed, bound));
  }

  const absl::Status& error() const { return error_; }

 private:
  void Check(const absl::Status& status) {
    if (status.ok()) return;
    if (error_.ok()) error_ = status;
    throw gloo::IoException(std::string{status.message()});
  }

  comm::Store* const store_;
  const std::string prefix_;
  const absl::Duration timeout_;
  absl::Status error_;
};

}  // namespace
}  // namespace tpserve::comm

// gloo::transport::tcp::Context::signalException(const std::string&): what Gloo itself calls
// when a recv times out. It sets an exception on every pair of the context (closing its
// socket, so the peers see the connection go) and wakes every thread waiting on one of the
// pairs' buffers. Gloo keeps it protected and Debian's libgloo-dev cannot include its header
// (gloo/transport/tcp/context.h needs gloo/common/memory.h, which the package lacks), so it is
// bound by its exported name; a libgloo without it fails to link rather than misbehave.
// Itanium C++ ABI: a non-virtual member function takes `this` first; tcp::Context's primary
// base is transport::Context, so both share one address.
void GlooTcpSignal(gloo::transport::Context* context, const std::string& msg) __asm__(
    "_ZN4gloo9transport3tcp7Context15signalExceptionERKNSt7__cxx1112basic_stringIcSt11char_"
    "traitsIcESaIcEEE");

namespace tpserve::comm {
namespace {

// A rendezvous context whose connections another thread can break (Abort). Gloo's
// Context::closeConnections() is no use for that: it closes the sockets without waking this
// rank's own threads blocked in a recv, which then wait for the full timeout.
class AbortableContext final : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;

  // Thread-safe: each pair takes its own lock and ignores a second exception.
  void Break(const std::string& msg) {
    if (transportContext_ == nullptr) return;  // not connected (or a world of one)
    // Only a TCP context has that function (CreateGlooCommunicator makes no other kind).
    const gloo::transport::Context& transport = *transportContext_;
    CHECK_EQ(std::string(typeid(transport).name()), "N4gloo9transport3tcp7ContextE");
    GlooTcpSignal(transportContext_.get(), msg);
  }
};

// A Status for an exception Gloo threw during `what` on rank `rank` of `world`.
absl::Status FromGlooException(std::exception_ptr ex, int rank, int world,
                               const std::string& what) {
  const std::string where = absl::StrCat("gloo rank ", rank, "/", world, " ", what, ": ");
  try {
    std::rethrow_exception(std::move(ex));
  } catch (const gloo::IoException& e) {
    // Timeouts read "Timed out waiting ...ms for recv operation", "Connect timeout",
    // "Read timeout"; the rest (closed or reset connections) mean a peer is gone.
    const std::string msg = e.what();
    if (absl::StrContains(msg, "Timed out") || absl::StrContains(msg, "timeout")) {
      return absl::DeadlineExceededError(where + msg);
    }
    return absl::UnavailableError(where + msg);
  } catch (const std::exception& e) {
    return absl::InternalError(where + e.what());
  } catch (...) {
    return absl::InternalError(where + "unknown exception");
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<AbortableContext> context, absl::Duration timeout)
      : context_(std::move(context)), timeout_(ToMillis(timeout)) {}

  int rank() const override { return context_->rank; }
  int world_size() const override { return context_->size; }
  std::string_view backend_name() const override { return "gloo"; }

  // Two ranks: Gloo's ring (each element is x0 + x1 on both ranks, however the ring cuts the
  // buffer). Three or more: a ring adds an element's parts in an order set by where its chunk
  // boundaries fall, and those move with `count` (a step's batch), so a row's sum would depend
  // on the rest of its batch. Gathering every part and adding them in rank order, ((x0 + x1) +
  // x2) + ..., makes each element's sum the same in every batch, on every rank, and equal to
  // the shared-memory communicator's; it moves (n - 1) x count floats per rank instead of the
  // ring's 2 (n - 1) / n x count.
  // Two ranks: Gloo's ring (each element is x0 + x1 on both ranks, however the ring cuts the
  // buffer). Three or more: a ring adds an element's parts in an order set by where its chunk
  // boundaries fall, and those move with `count` (a step's batch), so a row's sum would depend
  // on the rest of its batch. Gathering every part and adding them in rank order, ((x0 + x1) +
  // x2) + ..., makes each element's sum the same in every batch, on every rank, and equal to
  // the shared-memory communicator's; it moves (n - 1) x count floats per rank instead of the
  // ring's 2 (n - 1) / n x count.
  absl::Status AllReduceSum(float* data, int64_t count) override {
    return Run(absl::StrCat("all_reduce_sum(", count, " floats)"), count, [&] {
      if (world_size() > 2) return RankOrderedSum(data, static_cast<size_t>(count));
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, static_cast<size_t>(count));
      // Element-wise, so each element's sum depends only on the ring's fixed order.
      opts.setReduceFunction([](void* c, const void* a, const void* b, size_t n) {
        float* out = static_cast<float*>(c);
        const float* x = static_cast<const float*>(a);
        const float* y = static_cast<const float*>(b);
        for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
      });
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
  }

  absl::Status AllGather(const float* in, int64_t count, float* out) override {
    return Run(absl::StrCat("all_gather(", count, " floats)"), count,
               [&] { Gather(in, static_cast<size_t>(count), out); });
  }

  void Abort() override {
    aborted_.store(true);
    context_->Break("communicator aborted");
  }

 private:
  // Runs one collective: refuses after Abort or an earlier failure, turns every exception
  // into a Status and remembers the first failure.
  template <typename Fn>
  absl::Status Run(const std::string& what, int64_t count, Fn&& collective) {
    if (aborted_.load()) return Aborted(what);
    if (!failure_.ok()) {
      return absl::Status(failure_.code(),
                          absl::StrCat("gloo rank ", rank(), "/", world_size(), " ", what,
                                       " after an earlier failure: ", failure_.message()));
    }
    if (count < 0) {
      return absl::InvalidArgumentError(absl::StrCat("gloo ", what, ": negative count"));
    }
    if (count == 0) return absl::OkStatus();
    absl::Status status;
    try {
      collective();
    } catch (...) {
      status = FromGlooException(std::current_exception(), rank(), world_size(), what);
    }
    if (status.ok()) return status;
    if (aborted_.load()) status = Aborted(what);
    failure_ = status;
    return status;
  }

  // Gloo's allgather of `count` floats per rank into out [world_size, count], rank-major.
  void Gather(const float* in, size_t count, float* out) {
    gloo::AllgatherOptions opts(context_);
    // In place when `in` is this rank's slot of `out` (Gloo then reads it from there).
    if (in != out + static_cast<size_t>(rank()) * count) {
      opts.setInput(const_cast<float*>(in), count);
    }
    opts.setOutput(out, count * static_cast<size_t>(world_size()));
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  }

  // data [count] = the sum of every rank's data, added in rank order.
  void RankOrderedSum(float* data, size_t count) {
    gathered_.resize(count * static_cast<size_t>(world_size()));
    Gather(data, count, gathered_.data());
    std::copy(gathered_.begin(), gathered_.begin() + static_cast<std::ptrdiff_t>(count), data);
    for (int r = 1; r < world_size(); ++r) {
      const float* part = gathered_.data() + static_cast<size_t>(r) * count;
      for (size_t i = 0; i < count; ++i) data[i] += part[i];
    }
  }

  absl::Status Aborted(const std::string& what) const {
    return absl::AbortedError(
        absl::StrCat("gloo rank ", rank(), "/", world_size(), " ", what, ": communicator aborted"));
  }

  const std::shared_ptr<AbortableContext> context_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  absl::Status failure_;  // the first failed collective's; touched by the driving thread only
  std::vector<float> gathered_;  // [world_size, count] parts of a rank-ordered all-reduce
};

// Gloo's TCP pairs write with writev, without MSG_NOSIGNAL: a write to a peer that has just
// closed its socket (a dead or aborted rank) raises SIGPIPE, whose default action kills this
// process. A dead shard must fail the step, never take its peers down, so the process ignores
// SIGPIPE from the first communicator on and the write fails with EPIPE, which Gloo reports.
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action = {};
    action.sa_handler = SIG_IGN;
    sigemptyset(&action.sa_mask);
    PCHECK(sigaction(SIGPIPE, &action, nullptr) == 0) << "sigaction(SIGPIPE)";
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(Store* store, int rank,
                                                                     int world_size,
                                                                     const GlooOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("gloo: no store");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " outside a world of ", world_size));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("gloo: the timeout must be positive");
  }
  IgnoreSigpipe();
  StoreAdapter adapter(store, options.prefix, options.timeout);
  auto context = std::make_shared<AbortableContext>(rank, world_size);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    context->setTimeout(ToMillis(options.timeout));
    context->connectFullMesh(adapter, device);
  } catch (...) {
    const std::string what =
        absl::StrCat("rendezvous (prefix '", options.prefix, "', host ", options.host, ")");
    if (!adapter.error().ok()) {
      return absl::Status(adapter.error().code(),
                          absl::StrCat("gloo rank ", rank, "/", world_size, " ", what, ": ",
                                       adapter.error().message()));
    }
    absl::Status status = FromGlooException(std::current_exception(), rank, world_size, what);
    // Gloo asserts (rather than throws IoException) when it cannot resolve or bind the host.
    if (status.code() == absl::StatusCode::kInternal) {
      status = absl::UnavailableError(status.message());
    }
    return status;
  }
  return std::make_unique<GlooCommunicator>(std::move(context), options.timeout);
}

}  // namespace tpserve::comm
