#include "server/worker/rank_factory.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/engine/cpu_backend.h"

#ifdef TPSERVE_HAVE_CUDA
#include "server/comm/nccl/nccl_communicator.h"
#include "server/comm/staging/host_staging_communicator.h"
#include "server/engine/cuda/cuda_backend.h"
#endif

namespace tpserve::worker {

using tpserve::v1::CommBackend;

absl::Status CheckRankBackend(CommBackend backend, const RankDevice& where) {
  if (backend != tpserve::v1::COMM_BACKEND_GLOO && backend != tpserve::v1::COMM_BACKEND_NCCL &&
      backend != tpserve::v1::COMM_BACKEND_SHM && backend != tpserve::v1::COMM_BACKEND_AUTO) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init: backend ", tpserve::v1::CommBackend_Name(backend),
                     " is not supported (want COMM_BACKEND_AUTO, _SHM, _GLOO or _NCCL)"));
  }
  if (where.device < 0) {
    if (backend == tpserve::v1::COMM_BACKEND_NCCL) {
      return absl::InvalidArgumentError(
          "Init: backend COMM_BACKEND_NCCL needs a GPU worker (start it with --device N); "
          "this worker computes on the CPU");
    }
    return absl::OkStatus();
  }
#ifdef TPSERVE_HAVE_CUDA
  return absl::OkStatus();
#else
  return absl::InvalidArgumentError(
      absl::StrCat("worker: --device ", where.device,
                   " asks for a GPU, but this build has no CUDA backend "
                   "(configure with TPSERVE_CUDA=ON)"));
#endif
}

absl::StatusOr<RankResources> BuildRank(const RankDevice& where, comm::Store* store,
                                        const CommSpec& spec, const CommFactory& cpu_comms) {
  const CommBackend backend = spec.backend;
  RETURN_IF_ERROR(CheckRankBackend(backend, where));
  RankResources rank;
  if (where.device < 0) {
    rank.backend = std::make_unique<engine::CpuBackend>(std::max(1, where.threads));
    ASSIGN_OR_RETURN(rank.comm, cpu_comms(store, spec));
    return rank;
  }
#ifdef TPSERVE_HAVE_CUDA
  ASSIGN_OR_RETURN(std::unique_ptr<engine::CudaBackend> gpu,
                   engine::CudaBackend::Create(where.device));
  cudaStream_t stream = gpu->stream();
  rank.backend = std::move(gpu);
  if (spec.world_size == 1) {
    rank.comm = std::make_unique<comm::SingleRankCommunicator>();
  } else if (backend == tpserve::v1::COMM_BACKEND_NCCL ||
             backend == tpserve::v1::COMM_BACKEND_AUTO) {
    comm::NcclOptions options;
    options.device = where.device;
    options.timeout = spec.timeout;
    options.prefix = spec.prefix;
    options.stream = stream;  // stream-ordered with the backend's ops
    ASSIGN_OR_RETURN(rank.comm,
                     comm::CreateNcclCommunicator(store, spec.rank, spec.world_size, options));
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> host, cpu_comms(store, spec));
    rank.comm = std::make_unique<comm::HostStagingCommunicator>(std::move(host), stream);
  }
  return rank;
#else
  return absl::InternalError("unreachable: CheckRankBackend refuses GPU ranks without CUDA");
#endif
}

}  // namespace tpserve::worker
