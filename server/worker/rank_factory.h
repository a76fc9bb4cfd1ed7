// RankFactory: the Backend and Communicator of one worker rank, chosen once Init arrived:
// a CPU worker computes with CpuBackend and talks through the CommFactory (shared memory on
// one host, Gloo across hosts); a GPU worker (--device N) computes with CudaBackend and talks
// through NCCL on the backend's stream (stream-ordered; what AUTO means on a GPU), or through
// the CommFactory's communicator staged via pinned host memory (HostStagingCommunicator) when
// asked for GLOO or SHM, e.g. two ranks sharing one GPU, which NCCL refuses. Stateless.
#ifndef TPSERVE_SERVER_WORKER_RANK_FACTORY_H_
#define TPSERVE_SERVER_WORKER_RANK_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/comm/communicator.h"
#include "server/comm/store.h"
#include "server/engine/backend.h"
#include "server/worker/comm_factory.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::worker {

// Where a worker computes: device -1 is the CPU, otherwise a CUDA ordinal.
struct RankDevice {
  int device = -1;
  int threads = 1;  // CPU compute threads
};

// The communicator borrows the backend (its stream): destroy `comm` before `backend`.
struct RankResources {
  std::unique_ptr<engine::Backend> backend;
  std::unique_ptr<comm::Communicator> comm;
};

// Whether this build can serve `backend` on `where`: InvalidArgument naming the field when
// not (an unknown backend, NCCL on a CPU worker, or a GPU worker in a build without CUDA).
absl::Status CheckRankBackend(tpserve::v1::CommBackend backend, const RankDevice& where);

// Builds the rank of `spec` (spec.backend as Init asked) on `where`, meeting its peers through
// `store`. `cpu_comms` makes the host communicator (for CPU ranks, and for GPU ranks staged
// through host memory).
absl::StatusOr<RankResources> BuildRank(const RankDevice& where, comm::Store* store,
                                        const CommSpec& spec, const CommFactory& cpu_comms);

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_RANK_FACTORY_H_
