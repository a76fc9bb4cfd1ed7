// File: server/coordinator/rendezvous_server.h
//
// RendezvousServer: the key-value store through which a world's ranks meet (their Gloo and
// NCCL bootstraps, their host identities), served to the workers over their Session streams
// (StoreRequest in, StoreReply out). SET and ADD are answered at once; GET and WAIT block,
// each on a thread of its own so that the Session's reader keeps dispatching, in slices so
// that Close stops them promptly. What a worker may ask is bounded: key and value sizes, keys
// per WAIT, timeouts, blocking operations in flight. Keys carry the worker-chosen
// "gen<generation>/" prefix, so keys of an earlier world never match. Thread-safe.
#ifndef TPSERVE_SERVER_COORDINATOR_RENDEZVOUS_SERVER_H_
#define TPSERVE_SERVER_COORDINATOR_RENDEZVOUS_SERVER_H_

#include <functional>
#include <list>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/comm/store.h"
#include "server/protocol/store_codec.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::coordinator {

class RendezvousServer {
 public:
  using Reply = std::function<void(tpserve::v1::StoreReply)>;

  RendezvousServer() : store_(kMaxStoreBytes) {}
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;
  ~RendezvousServer();  // Close("")

  // Answers `request` through `reply`: at once, or later from a thread of its own (joined by
  // Close). A request out of bounds, or one that arrives while closed, gets an error reply.
  void Serve(const tpserve::v1::StoreRequest& request, Reply reply) ABSL_LOCKS_EXCLUDED(mu_);

  // Threads of blocking operations not yet joined: those running, and at most those that
  // answered since the last blocking request came.
  size_t threads_held() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return blockers_.size();
  }

  // Serves requests again after a Close (a new world).
  void Open() ABSL_LOCKS_EXCLUDED(mu_);

  // Refuses new requests, ends the blocking ones (with an error reply) and joins their
  // threads, then erases the keys under `erase_prefix` (none when empty).
  void Close(const std::string& erase_prefix) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A GET (its value) or WAIT (empty), run in slices until its timeout or Close.
  absl::StatusOr<std::string> Blocking(const protocol::StoreOp& op) ABSL_LOCKS_EXCLUDED(mu_);

  // A GET's or WAIT's thread; `done` once it has answered (it is then joined at the next
  // blocking request, or by Close).
  struct Blocker {
    std::thread thread;
    bool done = false;
  };
  // Joins the threads of the blocking operations that have answered.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Keys and values of every world together: a world of 1024 ranks needs far less.
  static constexpr size_t kMaxStoreBytes = 64 << 20;

  comm::InMemoryStore store_;
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Blocker> blockers_ ABSL_GUARDED_BY(mu_);  // GETs and WAITs, until joined
  size_t blocking_ ABSL_GUARDED_BY(mu_) = 0;          // of blockers_, not yet done
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_RENDEZVOUS_SERVER_H_
