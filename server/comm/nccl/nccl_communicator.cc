#include "server/comm/nccl/nccl_communicator.h"

#include <glog/logging.h>

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "server/common/status_macros.h"

namespace tpserve::comm {
namespace {

// Polls spin (yielding) for the first iterations, where a small collective finishes, and then
// back off to short sleeps so a stalled world does not burn a core.
constexpr int kSpinIterations = 2000;
constexpr absl::Duration kPollSleep = absl::Microseconds(50);

void Backoff(int iteration) {
  if (iteration < kSpinIterations) {
    std::this_thread::yield();
  } else {
    absl::SleepFor(kPollSleep);
  }
}

std::string NcclErrorText(ncclResult_t result, ncclComm_t comm) {
  return absl::StrCat(ncclGetErrorString(result), " (", ncclGetLastError(comm), ")");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(Store* store, int rank,
                                                                     int world_size,
                                                                     const NcclOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("nccl: store is null");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: rank ", rank, " outside a world of ", world_size));
  }
  if (options.device < 0) {
    return absl::InvalidArgumentError(absl::StrCat("nccl: bad device ", options.device));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("nccl: timeout must be positive");
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  const std::string key = absl::StrCat(options.prefix, "nccl_id");

  // Rendezvous first: a rank > 0 touches no CUDA API until rank 0 has published the id.
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    RETURN_IF_ERROR(store->Set(key, std::string(id.internal, sizeof(id.internal))));
  } else {
    absl::StatusOr<std::string> bytes = store->Get(key, options.timeout);
    if (!bytes.ok()) {
      return absl::Status(bytes.status().code(),
                          absl::StrCat("nccl rank ", rank,
                                       ": waiting for the unique id: ", bytes.status().message()));
    }
    if (bytes->size() != sizeof(id.internal)) {
      return absl::DataLossError(absl::StrCat("nccl rank ", rank, ": store key '", key, "' holds ",
                                              bytes->size(), " bytes, want ", sizeof(id.internal)));
    }
    std::memcpy(id.internal, bytes->data(), sizeof(id.internal));
  }

  CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  const bool stream_ordered = options.stream != nullptr;
  cudaStream_t stream = options.stream;
  if (!stream_ordered) {
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  auto comm = std::make_unique<NcclCommunicator>(rank, world_size, options.device, options.timeout,
                                                 stream, stream_ordered);
  RETURN_IF_ERROR(comm->Init(id, deadline));
  return comm;
}

NcclCommunicator::NcclCommunicator(int rank, int world_size, int device, absl::Duration timeout,
                                   cudaStream_t stream, bool stream_ordered)
    : rank_(rank),
      world_size_(world_size),
      device_(device),
      timeout_(timeout),
      stream_(stream),
      stream_ordered_(stream_ordered) {}

NcclCommunicator::~NcclCommunicator() {
  // Finalize (flushes pending work; non-blocking, so polled against the timeout) and destroy,
  // unless the communicator was aborted.
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (comm_ != nullptr) {
      status = Annotate("finalize", cuda::NcclStatus(ncclCommFinalize(comm_), "ncclCommFinalize",
                                                     __FILE__, __LINE__));
      if (!status.ok()) AbortLocked(status.message());
    }
  }
  if (status.ok()) status = WaitNotInProgress("finalize", absl::Now() + timeout_);
  {
    absl::MutexLock lock(&mu_);
    if (comm_ != nullptr) {
      status.Update(
          cuda::NcclStatus(ncclCommDestroy(comm_), "ncclCommDestroy", __FILE__, __LINE__));
      comm_ = nullptr;
    }
  }
  if (!status.ok()) LOG(WARNING) << "nccl rank " << rank_ << ": shutdown: " << status;
  if (!stream_ordered_) {
    absl::Status s =
        cuda::CudaStatus(cudaStreamDestroy(stream_), "cudaStreamDestroy", __FILE__, __LINE__);
    if (!s.ok()) LOG(WARNING) << s;
  }
}

absl::Status NcclCommunicator::Init(const ncclUniqueId& id, absl::Time deadline) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  {
    absl::MutexLock lock(&mu_);
    ncclComm_t comm = nullptr;
    // Non-blocking: usually returns ncclInProgress at once; WaitNotInProgress finishes it.
    absl::Status status =
        cuda::NcclStatus(ncclCommInitRankConfig(&comm, world_size_, id, rank_, &config),
                         "ncclCommInitRankConfig", __FILE__, __LINE__);
    comm_ = comm;
    if (!status.ok()) {
      status = Annotate("init", status);
      AbortLocked(status.message());
      return status;
    }
  }
  return WaitNotInProgress("init", deadline);
}

absl::Status NcclCommunicator::AllReduceSum(float* data, int64_t count) {
  RETURN_IF_ERROR(CheckCount(count));
  return Run("all-reduce", [&](ncclComm_t comm) {
    NCCL_RETURN_IF_ERROR(
        ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum, comm, stream_));
    return absl::OkStatus();
  });
}

absl::Status NcclCommunicator::AllReduceSumInt64(int64_t* data, int64_t count) {
  RETURN_IF_ERROR(CheckCount(count));
  return Run("all-reduce", [&](ncclComm_t comm) {
    NCCL_RETURN_IF_ERROR(
        ncclAllReduce(data, data, static_cast<size_t>(count), ncclInt64, ncclSum, comm, stream_));
    return absl::OkStatus();
  });
}

absl::Status NcclCommunicator::AllGather(const float* in, int64_t count, float* out) {
  RETURN_IF_ERROR(CheckCount(count));
  return Run("all-gather", [&](ncclComm_t comm) {
    NCCL_RETURN_IF_ERROR(
        ncclAllGather(in, out, static_cast<size_t>(count), ncclFloat32, comm, stream_));
    return absl::OkStatus();
  });
}

absl::Status NcclCommunicator::Synchronize() {
  if (!stream_ordered_) return absl::OkStatus();
  return WaitForCompletion("synchronize", absl::Now() + timeout_);
}

void NcclCommunicator::Abort() {
  aborted_.store(true, std::memory_order_release);
  absl::MutexLock lock(&mu_);
  AbortLocked("Abort() called");
}

template <typename Enqueue>
absl::Status NcclCommunicator::Run(const char* op, Enqueue enqueue) {
  const absl::Time deadline = absl::Now() + timeout_;
  {
    absl::MutexLock lock(&mu_);
    if (comm_ == nullptr) return AbortedStatusLocked();
    absl::Status status = enqueue(comm_);
    if (!status.ok()) {
      // After a failed NCCL call the communicator's state is unknown: take it down.
      status = Annotate(op, status);
      AbortLocked(status.message());
      return status;
    }
  }
  // Stream-ordered: only wait until NCCL has finished enqueueing (a non-blocking communicator
  // may still be doing so, and takes no further call until it has); the stream runs on.
  if (stream_ordered_) return WaitNotInProgress(op, deadline);
  return WaitForCompletion(op, deadline);
}

absl::Status NcclCommunicator::WaitForCompletion(const char* op, absl::Time deadline) {
  for (int i = 0;; ++i) {
    // Checked before taking mu_: Abort() holds mu_ while ncclCommAbort runs, which may take a
    // while, and the pending call must still return promptly.
    if (aborted_.load(std::memory_order_acquire)) {
      return Annotate(op, absl::AbortedError("communicator aborted"));
    }
    bool enqueued = false;
    {
      absl::MutexLock lock(&mu_);
      if (comm_ == nullptr) return AbortedStatusLocked();
      ncclResult_t async = ncclSuccess;
      absl::Status status = cuda::NcclStatus(ncclCommGetAsyncError(comm_, &async),
                                             "ncclCommGetAsyncError", __FILE__, __LINE__);
      if (status.ok() && async != ncclSuccess && async != ncclInProgress) {
        status = absl::UnavailableError(
            absl::StrCat("asynchronous NCCL error: ", NcclErrorText(async, comm_)));
      }
      if (!status.ok()) {
        status = Annotate(op, absl::UnavailableError(status.message()));
        AbortLocked(status.message());
        return status;
      }
      // ncclInProgress: the non-blocking enqueue has not reached the stream yet.
      enqueued = async == ncclSuccess;
    }
    if (enqueued) {
      const cudaError_t query = cudaStreamQuery(stream_);
      if (query == cudaSuccess) return absl::OkStatus();
      if (query != cudaErrorNotReady) {
        absl::Status status =
            Annotate(op, cuda::CudaStatus(query, "cudaStreamQuery", __FILE__, __LINE__));
        absl::MutexLock lock(&mu_);
        AbortLocked(status.message());
        return status;
      }
    }
    if (absl::Now() > deadline) {
      absl::Status status = Annotate(op, absl::DeadlineExceededError(absl::StrCat(
                                             "not complete within ", absl::FormatDuration(timeout_),
                                             "; aborting the communicator")));
      absl::MutexLock lock(&mu_);
      AbortLocked(status.message());
      return status;
    }
    Backoff(i);
  }
}

absl::Status NcclCommunicator::WaitNotInProgress(const char* op, absl::Time deadline) {
  for (int i = 0;; ++i) {
    {
      absl::MutexLock lock(&mu_);
      if (comm_ == nullptr) return AbortedStatusLocked();
      ncclResult_t async = ncclSuccess;
      absl::Status status = cuda::NcclStatus(ncclCommGetAsyncError(comm_, &async),
                                             "ncclCommGetAsyncError", __FILE__, __LINE__);
      if (status.ok() && async == ncclSuccess) return absl::OkStatus();
      if (status.ok() && async != ncclInProgress) {
        status = absl::UnavailableError(NcclErrorText(async, comm_));
      }
      if (status.ok() && absl::Now() > deadline) {
        status = absl::DeadlineExceededError(absl::StrCat("not complete by the deadline (timeout ",
                                                          absl::FormatDuration(timeout_),
                                                          "); is every rank of the world up?"));
      }
      if (!status.ok()) {
        status = Annotate(op, status);
        AbortLocked(status.message());
        return status;
      }
    }
    Backoff(kSpinIterations + i);  // init and finalize take milliseconds: sleep, do not spin
  }
}

void NcclCommunicator::AbortLocked(absl::string_view reason) {
  aborted_.store(true, std::memory_order_release);
  if (abort_reason_.empty()) abort_reason_.assign(reason.data(), reason.size());
  if (comm_ == nullptr) return;
  // ncclCommAbort stops the NCCL kernels still running and frees the communicator.
  absl::Status status = cuda::NcclStatus(ncclCommAbort(comm_), "ncclCommAbort", __FILE__, __LINE__);
  comm_ = nullptr;
  if (!status.ok()) LOG(WARNING) << "nccl rank " << rank_ << ": " << status;
}

absl::Status NcclCommunicator::AbortedStatusLocked() const {
  return absl::AbortedError(absl::StrCat("nccl rank ", rank_, ": communicator aborted: ",
                                         abort_reason_.empty() ? "Abort() called" : abort_reason_));
}

absl::Status NcclCommunicator::Annotate(const char* op, const absl::Status& status) const {
  return absl::Status(status.code(),
                      absl::StrCat("nccl rank ", rank_, ": ", op, ": ", status.message()));
}

absl::Status NcclCommunicator::CheckCount(int64_t count) const {
  if (count >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("nccl rank ", rank_, ": negative count ", count));
}

}  // namespace tpserve::comm
