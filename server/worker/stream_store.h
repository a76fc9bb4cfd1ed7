// StreamStore: the worker's view of the coordinator's rendezvous store. Every operation is
// sent as a StoreRequest through a caller-supplied `send` function (the Session stream) and
// blocks, bounded by its timeout, until the reader of that stream hands the matching
// StoreReply to Deliver(). Close() fails every pending and future operation promptly (the
// stream ended). Thread-safe: any thread may call any method.
#ifndef TPSERVE_SERVER_WORKER_STREAM_STORE_H_
#define TPSERVE_SERVER_WORKER_STREAM_STORE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/comm/store.h"
#include "server/protocol/store_codec.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::worker {

class StreamStore final : public comm::Store {
 public:
  // Writes one StoreRequest to the coordinator; an error fails the operation at once.
  using SendFn = std::function<absl::Status(const tpserve::v1::StoreRequest&)>;

  // `op_timeout` bounds Set and Add (which the coordinator answers at once); Get and Wait
  // are bounded by their own timeout plus `op_timeout` of slack for the round trip.
  StreamStore(SendFn send, absl::Duration op_timeout);

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

  // Hands a reply to the operation waiting on its id (replies to unknown ids are dropped:
  // their operation already timed out).
  void Deliver(const tpserve::v1::StoreReply& reply);
  // Fails pending and future operations with `reason`.
  void Close(const absl::Status& reason);

 private:
  // Sends `op` as a StoreRequest (its id assigned here) and waits up to `timeout` for the reply.
  absl::StatusOr<tpserve::v1::StoreReply> Call(const protocol::StoreOp& op, absl::Duration timeout);

  const SendFn send_;
  const absl::Duration op_timeout_;
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Operations in flight: id -> reply once it arrived.
  absl::flat_hash_map<uint64_t, std::optional<tpserve::v1::StoreReply>> pending_
      ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_STREAM_STORE_H_
