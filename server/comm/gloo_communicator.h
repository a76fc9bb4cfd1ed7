// GlooCommunicator: the Communicator of CPU workers, Gloo collectives over TCP. The ranks meet
// through a tpserve Store (each publishes the addresses of its listening sockets under
// `prefix` + Gloo's keys), then hold one TCP connection to every peer (full mesh).
//
// Every collective is bounded by GlooOptions::timeout and returns DeadlineExceeded when a peer
// stops participating, Unavailable when a peer's connection is gone, Aborted after Abort().
// Gloo's exceptions never leave this module. After a failed collective the world is broken
// (Gloo closes every connection of this rank); later calls fail at once with the first error.
// AllReduceSum leaves bit-identical results on every rank, each element the parts added in rank
// order whatever the buffer's length (a step's batch): Gloo's ring at two ranks, an allgather
// and a rank-ordered sum at more (the ring's order moves with the length there).
//
// Thread-safety: one thread drives the collectives; Abort() may be called from any thread.
#ifndef TPSERVE_SERVER_COMM_GLOO_COMMUNICATOR_H_
#define TPSERVE_SERVER_COMM_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/comm/communicator.h"
#include "server/comm/store.h"

namespace tpserve::comm {

struct GlooOptions {
  // Address this rank listens on for its peers (one listening socket per peer, any port).
  std::string host = "127.0.0.1";
  // Bound on the rendezvous and on every collective.
  absl::Duration timeout = absl::Seconds(30);
  // Prefix of this world's keys in the store, e.g. "gen3/": one per world generation.
  std::string prefix;
};

// Joins the world of `world_size` ranks as `rank`: publishes this rank's addresses in `store`,
// waits for every peer's and connects to each. DeadlineExceeded (naming the missing key)
// when a peer does not join within options.timeout; InvalidArgument for a bad rank, size or
// timeout; Unavailable when the host cannot be bound or a peer cannot be reached. `store` is
// used only during this call. The first call makes the process ignore SIGPIPE: Gloo writes
// without MSG_NOSIGNAL, and a peer that dies must fail a collective, not kill this process.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(Store* store, int rank,
                                                                     int world_size,
                                                                     const GlooOptions& options);

}  // namespace tpserve::comm

#endif  // TPSERVE_SERVER_COMM_GLOO_COMMUNICATOR_H_
