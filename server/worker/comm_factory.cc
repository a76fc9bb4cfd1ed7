#include "server/worker/comm_factory.h"

#include "absl/status/status.h"

// TODO(worker): drop the fallback once server/comm/gloo_communicator.h has landed.
#if __has_include("server/comm/gloo_communicator.h")
#include "server/comm/gloo_communicator.h"
#define TPSERVE_HAVE_GLOO_COMMUNICATOR 1
#endif

namespace tpserve::worker {

CommFactory DefaultCommFactory() {
  return [](comm::Store* store,
            const CommSpec& spec) -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
    if (spec.world_size == 1) return std::make_unique<comm::SingleRankCommunicator>();
#ifdef TPSERVE_HAVE_GLOO_COMMUNICATOR
    comm::GlooOptions options;
    options.host = spec.host;
    options.timeout = spec.timeout;
    options.prefix = spec.prefix;
    return comm::CreateGlooCommunicator(store, spec.rank, spec.world_size, options);
#else
    return absl::UnimplementedError("this build has no Gloo communicator (world size > 1)");
#endif
  };
}

}  // namespace tpserve::worker
