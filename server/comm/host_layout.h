// HostLayout: which host each rank of a world runs on, as far as shared memory is concerned,
// exchanged through the rendezvous store. Two ranks are "on one host" when they see the same
// /dev/shm of the same running kernel (boot id + the device and inode of /dev/shm): then a
// segment one makes the other can map, whatever containers or namespaces they run in. Also the
// CPUs this process may run on, to size compute threads. Plain value; the functions are
// thread-safe.
#ifndef TPSERVE_SERVER_COMM_HOST_LAYOUT_H_
#define TPSERVE_SERVER_COMM_HOST_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/comm/store.h"

namespace tpserve::comm {

struct HostLayout {
  std::vector<std::string> hosts;  // [world_size] each rank's host identity

  // Whether every rank shares one host.
  bool OneHost() const;
  // How many ranks (itself included) share `rank`'s host.
  int RanksOnHostOf(int rank) const;
};

// This process's host identity: "<boot id>/<dev>:<inode of /dev/shm>"; "<hostname>/no-shm"
// when /dev/shm is missing (such a host shares memory with no one else).
std::string LocalHostIdentity();

// CPUs this process may run on (its affinity mask), at least 1.
int UsableCpus();

// Publishes `identity` as `rank`'s under prefix + "host/<rank>" and reads every rank's
// (waiting up to `timeout`). InvalidArgument when a peer's identity is empty or longer than
// 256 bytes; the store's error (DeadlineExceeded naming the key) when a rank does not come.
absl::StatusOr<HostLayout> ExchangeHostIdentities(Store* store, const std::string& prefix, int rank,
                                                  int world_size, const std::string& identity,
                                                  absl::Duration timeout);

}  // namespace tpserve::comm

#endif  // TPSERVE_SERVER_COMM_HOST_LAYOUT_H_
