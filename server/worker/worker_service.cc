#include "server/worker/worker_service.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/common/grpc_status.h"
#include "server/common/status_macros.h"

namespace tpserve::worker {

grpc::Status WorkerService::Session(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<tpserve::v1::WorkerMessage, tpserve::v1::CoordinatorMessage>* stream) {
  absl::StatusOr<AcceptedInit> init = WorkerSession::ReadInit(stream, options_);
  if (!init.ok()) return ToGrpcStatus(init.status());
  const uint64_t epoch = init->world.coordinator_epoch;
  WorkerSession session(context, stream, options_, *std::move(init), [this] {
    absl::MutexLock lock(&mu_);
    ending_ = true;
  });
  if (absl::Status admitted = Admit(&session, epoch); !admitted.ok()) {
    LOG(WARNING) << "refusing the Session of coordinator epoch " << epoch << ": " << admitted;
    session.Refuse(admitted);  // so that the coordinator can tell why
    return ToGrpcStatus(admitted);
  }
  grpc::Status status = session.Run();
  Leave(&session);
  return status;
}

absl::Status WorkerService::Admit(WorkerSession* session, uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (epoch > 0 && epoch < latest_epoch_) {
    return absl::FailedPreconditionError(
        absl::StrCat("a coordinator with a later epoch (", latest_epoch_,
                     ") has taken this worker over; this coordinator's epoch is ", epoch));
  }
  const bool later = epoch > 0 && epoch > std::max(current_epoch_, claim_);
  if (later && current_ != nullptr) {
    RETURN_IF_ERROR(TakeOverLocked(epoch));
  } else if (later && claim_ != 0) {
    claim_ = 0;  // free, but claimed for an earlier epoch: that claimant gives way
  } else {
    RETURN_IF_ERROR(AwaitFreeLocked(epoch));
  }
  current_ = session;
  current_epoch_ = epoch;
  latest_epoch_ = std::max(latest_epoch_, epoch);
  ending_ = false;
  return absl::OkStatus();
}

absl::Status WorkerService::TakeOverLocked(uint64_t epoch) {
  LOG(INFO) << "a coordinator with epoch " << epoch
            << " takes this worker over from the Session of epoch " << current_epoch_;
  claim_ = epoch;
  WorkerSession* superseded = current_;
  ++superseding_;  // `superseded` stays alive until this is back to 0 (Leave)
  mu_.Unlock();
  superseded->Supersede();
  mu_.Lock();
  --superseding_;
  auto ended_or_claimed = [this, epoch]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return current_ == nullptr || claim_ != epoch;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ended_or_claimed), options_.close_grace + absl::Seconds(5));
  if (claim_ != epoch) {  // a coordinator with a later epoch still claimed it meanwhile
    return absl::AbortedError(kSupersededMessage);
  }
  claim_ = 0;
  if (current_ != nullptr) {
    return absl::UnavailableError("the Session this one supersedes did not end in time");
  }
  return absl::OkStatus();
}

absl::Status WorkerService::AwaitFreeLocked(uint64_t epoch) {
  // The current Session's end may not have reached this side yet (a coordinator that
  // cancels and re-dials at once): give it a moment, and an ending one time to finish. A
  // claimed worker is not free until its claimant has it.
  auto free = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return current_ == nullptr && claim_ == 0; };
  mu_.AwaitWithTimeout(absl::Condition(&free), absl::Seconds(1));
  if (!free() && ending_) {
    mu_.AwaitWithTimeout(absl::Condition(&free), options_.close_grace + absl::Seconds(5));
  }
  if (free()) return absl::OkStatus();
  const bool later = std::max(current_epoch_, claim_) > epoch;
  return absl::FailedPreconditionError(absl::StrCat(
      "this worker already serves a Session", later ? " of a coordinator with a later epoch" : ""));
}

void WorkerService::Leave(WorkerSession* session) {
  absl::MutexLock lock(&mu_);
  if (current_ == session) {
    current_ = nullptr;
    current_epoch_ = 0;
    ending_ = false;
  }
  auto unreached = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return superseding_ == 0; };
  mu_.Await(absl::Condition(&unreached));
}

}  // namespace tpserve::worker
