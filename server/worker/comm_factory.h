// CommFactory: how a worker builds the communicator of its world once Init arrived and the
// ranks have told each other their hosts. The default gives a world of one a
// SingleRankCommunicator; otherwise shared memory when every rank is on this host (asked for
// as SHM, or chosen under AUTO) and Gloo over TCP otherwise (GLOO, or AUTO across hosts).
// Tests may inject their own. Stateless.
#ifndef TPSERVE_SERVER_WORKER_COMM_FACTORY_H_
#define TPSERVE_SERVER_WORKER_COMM_FACTORY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/comm/communicator.h"
#include "server/comm/host_layout.h"
#include "server/comm/store.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::worker {

struct CommSpec {
  int rank = 0;
  int world_size = 1;
  std::string host;                            // address this rank listens on for its peers
  absl::Duration timeout = absl::Seconds(30);  // per collective and for the rendezvous
  std::string prefix;                          // rendezvous key prefix: "gen<world_generation>/"
  // What the coordinator asked for: GLOO, SHM or AUTO (NCCL is the RankFactory's).
  tpserve::v1::CommBackend backend = tpserve::v1::COMM_BACKEND_AUTO;
  comm::HostLayout hosts;  // every rank's host (a world of one: empty)
  // Whether a rank waiting in a shared-memory collective may spin before it sleeps: only when
  // this host's ranks times their compute threads fit its cores.
  bool spin = true;
};

// The host-local backend `spec` resolves to: SHM or GLOO (AUTO decided by spec.hosts).
// FailedPrecondition when SHM is asked for across hosts.
absl::StatusOr<tpserve::v1::CommBackend> ResolveHostBackend(const CommSpec& spec);

// Builds the communicator of `spec`, meeting the peers through `store` (which outlives the
// call, not necessarily the communicator).
using CommFactory = std::function<absl::StatusOr<std::unique_ptr<comm::Communicator>>(
    comm::Store*, const CommSpec&)>;

// World size 1: SingleRankCommunicator; else CreateShmCommunicator or CreateGlooCommunicator
// as ResolveHostBackend says.
CommFactory DefaultCommFactory();

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_COMM_FACTORY_H_
