// ShmCommunicator: the Communicator of CPU ranks that share a host, through one POSIX
// shared-memory segment per world (made by rank 0 at rendezvous, unlinked as soon as every rank
// has mapped it, so nothing is left behind however the world ends).
//
// Protocol. Collectives are numbered 1, 2, ... on every rank alike (each chunk of a large one
// counts as one). Rank r writes its part of collective k into its slot of parity k % 2, then
// posts k in its own counter (a futex word); a rank that needs the parts waits until the
// ranks it reads from have posted k: a short spin (ShmOptions::spin), then a futex sleep, so
// a waiting rank does not burn the core its peer needs. A rank writes a slot of collective k
// only once every rank has posted k - 1, i.e. has finished reading collective k - 2, which used
// the same slot. All-reduce adds the parts in rank order (0, 1, ...) on every rank: results
// are deterministic and bit-identical across ranks, and equal to Gloo's.
//
// Faults. Every wait is bounded by ShmOptions::timeout (DeadlineExceeded); Abort() wakes it
// (Aborted); a peer whose process is gone is noticed within ShmOptions::liveness_check
// (Unavailable). A rank whose collective fails marks the segment broken and wakes every
// waiter, so its peers fail at once instead of waiting out their timeout; every later call
// fails with the first error.
//
// Thread-safety: one thread drives the collectives; Abort() may be called from any thread.
#ifndef TPSERVE_SERVER_COMM_SHM_SHM_COMMUNICATOR_H_
#define TPSERVE_SERVER_COMM_SHM_SHM_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/comm/communicator.h"
#include "server/comm/store.h"

namespace tpserve::comm {

struct ShmOptions {
  // Prefix of this world's keys in the store, e.g. "gen3/": one per world generation.
  std::string prefix;
  // Bound on the rendezvous and on every collective.
  absl::Duration timeout = absl::Seconds(30);
  // How long a waiting rank spins before it sleeps on the futex. When the peer has a core of
  // its own, spinning saves the sleep and wake-up, which on virtual machines costs far more
  // than the futex round trip (measured on a 2-vCPU VM, SmolLM2 TP=2: 50 µs of spin left each
  // rank waiting 40% of a decode step; 0.5 to 5 ms, 10%). On a host with more ranks (times
  // threads) than cores it only steals the peer's core: use zero.
  absl::Duration spin = absl::Milliseconds(1);
  // While sleeping, how often a rank checks that the peers it waits for still run.
  absl::Duration liveness_check = absl::Milliseconds(100);
  // Bytes of one rank's slot (two per rank); larger collectives run in chunks of this size.
  int64_t slot_bytes = int64_t{1} << 20;
};

// Joins the world of `world_size` ranks as `rank`: rank 0 removes the segments of killed
// worlds, creates this world's segment and publishes its name under options.prefix; the
// others map it and say so; rank 0 then unlinks the name. DeadlineExceeded (naming the key)
// when a peer does not join within options.timeout; InvalidArgument for a bad rank, size or
// option; FailedPrecondition when the segment cannot be made or mapped (e.g. a rank on another
// host). `store` is used only during this call.
absl::StatusOr<std::unique_ptr<Communicator>> CreateShmCommunicator(Store* store, int rank,
                                                                    int world_size,
                                                                    const ShmOptions& options);

}  // namespace tpserve::comm

#endif  // TPSERVE_SERVER_COMM_SHM_SHM_COMMUNICATOR_H_
