// RankFactory: the Backend and Communicator of one worker rank, chosen once Init arrived:
// a CPU worker computes with CpuBackend and talks through the CommFactory (Gloo); a GPU
// worker (--device N) computes with CudaBackend and talks through NCCL on the backend's stream
// (stream-ordered), or through Gloo staged via pinned host memory (HostStagingCommunicator)
// where NCCL cannot be used, e.g. two ranks sharing one GPU. Stateless.
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
// not (NCCL on a CPU worker, or a GPU worker in a build without CUDA).
absl::Status CheckRankBackend(tpserve::v1::CommBackend backend, const RankDevice& where);

// Builds the rank of `spec` on `where`, meeting its peers through `store`. `cpu_comms` makes
// the Gloo communicator (for CPU ranks, and for GPU ranks staged through host memory).
absl::StatusOr<RankResources> BuildRank(tpserve::v1::CommBackend backend, const RankDevice& where,
                                        comm::Store* store, const CommSpec& spec,
                                        const CommFactory& cpu_comms);

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_RANK_FACTORY_H_
