// NcclCommunicator: the Communicator of one GPU rank, over a non-blocking NCCL communicator and
// a CUDA stream on its device. Every collective takes DEVICE pointers (memory on
// NcclOptions::device) and runs on stream(). With a stream of its own it returns once the
// stream has finished the collective, so the results are ready for any stream. Given the
// backend's stream (NcclOptions::stream) it is stream-ordered: a collective returns once
// enqueued, ordered after the backend's work and before what the backend enqueues next, and
// Synchronize() waits for the stream (no host synchronisation inside a step). A watchdog bounds
// each call by the timeout: an NCCL async error or a missed deadline aborts the NCCL communicator
// and returns Unavailable or DeadlineExceeded; from then on (and after Abort()) every call returns
// Aborted. One thread drives the collectives at a time; Abort() is thread-safe and may come from
// any thread.
#ifndef TPSERVE_SERVER_COMM_NCCL_NCCL_COMMUNICATOR_H_
#define TPSERVE_SERVER_COMM_NCCL_NCCL_COMMUNICATOR_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/comm/communicator.h"
#include "server/comm/store.h"

namespace tpserve::comm {

struct NcclOptions {
  int device = 0;                              // CUDA ordinal this rank runs on
  absl::Duration timeout = absl::Seconds(30);  // bounds creation and each collective
  std::string prefix;                          // store key prefix (the world generation)
  // When set: the stream to enqueue on (not owned; the caller keeps it alive longer than the
  // communicator) and stream-ordered collectives. Null: a stream of its own, blocking calls.
  cudaStream_t stream = nullptr;
};

// Creates rank `rank` of a world of `world_size` GPU ranks. Rank 0 makes the NCCL unique id
// and publishes it in `store` under `<prefix>nccl_id`; every other rank reads it from there
// before touching CUDA. The whole creation (rendezvous and NCCL init) is bounded by
// options.timeout: DeadlineExceeded when a rank is missing. `store` need only outlive this
// call.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(Store* store, int rank,
                                                                     int world_size,
                                                                     const NcclOptions& options);

class NcclCommunicator final : public Communicator {
 public:
  // Use CreateNcclCommunicator. `stream` is on `device`; when `stream_ordered` it is borrowed,
  // otherwise it becomes owned by this object.
  NcclCommunicator(int rank, int world_size, int device, absl::Duration timeout,
                   cudaStream_t stream, bool stream_ordered);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Joins the NCCL world `id` (non-blocking init polled until `deadline`). On failure the
  // communicator is left aborted.
  absl::Status Init(const ncclUniqueId& id, absl::Time deadline);

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend_name() const override { return "nccl"; }

  // data: device [count] floats; in place.
  absl::Status AllReduceSum(float* data, int64_t count) override;
  absl::Status AllReduceSumInt64(int64_t* data, int64_t count) override;
  // in: device [count]; out: device [world_size * count], rank-major. out may hold in at
  // offset rank * count (in-place gather).
  absl::Status AllGather(const float* in, int64_t count, float* out) override;
  // Stream-ordered: waits, bounded by the timeout, until the stream has finished everything
  // enqueued on it. Otherwise a no-op.
  absl::Status Synchronize() override;
  void Abort() override;

  // The stream every collective runs on. Work the caller enqueues here before a collective is
  // ordered before it (stream-ordered use); writes made on other streams must be complete.
  cudaStream_t stream() const { return stream_; }

 private:
  // Enqueues one collective with `enqueue(comm)` (a checked NCCL call returning Status, run
  // under mu_) and waits for it; `op` names it in errors.
  template <typename Enqueue>
  absl::Status Run(const char* op, Enqueue enqueue);
  // Polls the NCCL async state and the stream until the enqueued work of `op` is done, an
  // error shows, Abort() is called or `deadline` passes.
  absl::Status WaitForCompletion(const char* op, absl::Time deadline);
  // Polls ncclCommGetAsyncError until not in progress (init, finalize) or `deadline`.
  absl::Status WaitNotInProgress(const char* op, absl::Time deadline);
  // Aborts the NCCL communicator (once) and records why later calls fail.
  void AbortLocked(absl::string_view reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `status` with "nccl rank R: <op>: " in front of its message, same code.
  absl::Status Annotate(const char* op, const absl::Status& status) const;
  absl::Status AbortedStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckCount(int64_t count) const;

  const int rank_;
  const int world_size_;
  const int device_;
  const absl::Duration timeout_;
  const cudaStream_t stream_;
  const bool stream_ordered_;  // borrowed stream, collectives return once enqueued

  // Set first by Abort() so a polling thread stops promptly, before it takes mu_.
  std::atomic<bool> aborted_{false};
  absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_) = nullptr;  // null once aborted or destroyed
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve::comm

#endif  // TPSERVE_SERVER_COMM_NCCL_NCCL_COMMUNICATOR_H_
