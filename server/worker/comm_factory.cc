#include "server/worker/comm_factory.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/shm/shm_communicator.h"

namespace tpserve::worker {

using tpserve::v1::CommBackend;

absl::StatusOr<CommBackend> ResolveHostBackend(const CommSpec& spec) {
  const bool one_host = spec.hosts.OneHost();
  switch (spec.backend) {
    case tpserve::v1::COMM_BACKEND_AUTO:
      return one_host ? tpserve::v1::COMM_BACKEND_SHM : tpserve::v1::COMM_BACKEND_GLOO;
    case tpserve::v1::COMM_BACKEND_SHM:
      if (!one_host) {
        return absl::FailedPreconditionError(
            absl::StrCat("Init: backend COMM_BACKEND_SHM needs every rank on one host, but only ",
                         spec.hosts.RanksOnHostOf(spec.rank), " of the ", spec.world_size,
                         " ranks share this worker's host (use gloo or auto)"));
      }
      return spec.backend;
    case tpserve::v1::COMM_BACKEND_GLOO:
      return spec.backend;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Init: backend ", tpserve::v1::CommBackend_Name(spec.backend),
                       " is not a host communicator (want GLOO, SHM or AUTO)"));
  }
}

CommFactory DefaultCommFactory() {
  return [](comm::Store* store,
            const CommSpec& spec) -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
    if (spec.world_size == 1) return std::make_unique<comm::SingleRankCommunicator>();
    absl::StatusOr<CommBackend> backend = ResolveHostBackend(spec);
    if (!backend.ok()) return backend.status();
    if (*backend == tpserve::v1::COMM_BACKEND_SHM) {
      comm::ShmOptions options;
      options.prefix = spec.prefix;
      options.timeout = spec.timeout;
      if (!spec.spin) options.spin = absl::ZeroDuration();
      return comm::CreateShmCommunicator(store, spec.rank, spec.world_size, options);
    }
    comm::GlooOptions options;
    options.host = spec.host;
    options.timeout = spec.timeout;
    options.prefix = spec.prefix;
    return comm::CreateGlooCommunicator(store, spec.rank, spec.world_size, options);
  };
}

}  // namespace tpserve::worker
