// Store: the key/value rendezvous store the ranks of one world meet through (Gloo's
// addresses, NCCL's unique id). Workers see a Store whose operations travel over their
// control stream to the coordinator, which serves them from an InMemoryStore. Keys carry a
// world-generation prefix so that keys of an earlier world never match. Implementations are
// thread-safe.
#ifndef TPSERVE_SERVER_COMM_STORE_H_
#define TPSERVE_SERVER_COMM_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tpserve::comm {

class Store {
 public:
  virtual ~Store() = default;
  // Sets `key` to `value` (overwriting) and wakes the waiters on it.
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting up to `timeout` for it to be set; DeadlineExceeded naming the
  // key otherwise.
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;
  // Waits up to `timeout` until every key is set; DeadlineExceeded naming a missing key.
  virtual absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) = 0;
  // Adds `delta` to the integer value of `key` (0 when unset) and returns the new value.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
};

// A Store in this process's memory, of at most `max_bytes` of keys and values together (a
// Set or Add past it is ResourceExhausted: what peers put there is bounded).
class InMemoryStore final : public Store {
 public:
  explicit InMemoryStore(size_t max_bytes = SIZE_MAX) : max_bytes_(max_bytes) {}
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  // Forgets every key starting with `prefix` (an ended world generation).
  void EraseWithPrefix(const std::string& prefix);

 private:
  // Stores `value` under `key` within max_bytes_.
  absl::Status PutLocked(const std::string& key, std::string value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_bytes_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of every key and value
};

}  // namespace tpserve::comm

#endif  // TPSERVE_SERVER_COMM_STORE_H_
