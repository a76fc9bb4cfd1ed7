// CommFactory: how a worker builds the communicator of its world once Init arrived. The
// default builds Gloo over TCP (a world of one needs no peers and gets a
// SingleRankCommunicator); tests may inject their own. Stateless.
#ifndef TPSERVE_SERVER_WORKER_COMM_FACTORY_H_
#define TPSERVE_SERVER_WORKER_COMM_FACTORY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/comm/communicator.h"
#include "server/comm/store.h"

namespace tpserve::worker {

struct CommSpec {
  int rank = 0;
  int world_size = 1;
  std::string host;                            // address this rank listens on for its peers
  absl::Duration timeout = absl::Seconds(30);  // per collective and for the rendezvous
  std::string prefix;                          // rendezvous key prefix: "gen<world_generation>/"
};

// Builds the communicator of `spec`, meeting the peers through `store` (which outlives the
// call, not necessarily the communicator).
using CommFactory = std::function<absl::StatusOr<std::unique_ptr<comm::Communicator>>(
    comm::Store*, const CommSpec&)>;

// World size 1: SingleRankCommunicator; otherwise CreateGlooCommunicator.
CommFactory DefaultCommFactory();

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_COMM_FACTORY_H_
