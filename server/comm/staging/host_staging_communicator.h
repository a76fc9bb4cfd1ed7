// HostStagingCommunicator: lets GPU ranks use a host communicator (Gloo or shm) by staging
// every collective through pinned host memory: device → host copy on the backend's stream,
// the inner collective on the host, host → device copy back onto the stream. For worlds NCCL
// refuses, such as two ranks sharing one GPU, and for GPUs without a NCCL path between them.
// It synchronises the host once per collective, so it is slower than NCCL by design. Owns the
// inner communicator and the staging buffer; the stream is borrowed. Same threading as the
// inner communicator; Abort() may come from any thread.
#ifndef TPSERVE_SERVER_COMM_STAGING_HOST_STAGING_COMMUNICATOR_H_
#define TPSERVE_SERVER_COMM_STAGING_HOST_STAGING_COMMUNICATOR_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/comm/communicator.h"

namespace tpserve::comm {

class HostStagingCommunicator final : public Communicator {
 public:
  // `inner` takes host pointers; `stream` (on the current device) orders the copies after the
  // backend's work and must outlive this object.
  HostStagingCommunicator(std::unique_ptr<Communicator> inner, cudaStream_t stream);
  ~HostStagingCommunicator() override;
  HostStagingCommunicator(const HostStagingCommunicator&) = delete;
  HostStagingCommunicator& operator=(const HostStagingCommunicator&) = delete;

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string_view backend_name() const override { return inner_->backend_name(); }

  // data: device [count] f32; in place.
  absl::Status AllReduceSum(float* data, int64_t count) override;
  absl::Status AllReduceSumInt64(int64_t* data, int64_t count) override;
  // in: device [count]; out: device [world_size * count], rank-major.
  absl::Status AllGather(const float* in, int64_t count, float* out) override;
  // As AllGather, through the inner Gather: only rank 0 copies the result back to the device.
  absl::Status Gather(const float* in, int64_t count, float* out) override;
  // Waits for the copies back to the device.
  absl::Status Synchronize() override;
  void Abort() override { inner_->Abort(); }

 private:
  // Makes the pinned staging buffer hold at least `count` floats.
  absl::Status Reserve(int64_t count);
  // Copies device [count] → staging [0, count) and waits for it (and the work before it).
  absl::Status ToHost(const float* device, int64_t count);
  // AllGather (to_every_rank) or Gather of device `in` [count] into device `out`.
  absl::Status Staged(const float* in, int64_t count, float* out, bool to_every_rank);
  // Enqueues staging [0, count) → device [count] on the stream.
  absl::Status ToDevice(float* device, int64_t count);

  std::unique_ptr<Communicator> inner_;
  const cudaStream_t stream_;
  float* staging_ = nullptr;  // pinned host [capacity_]
  int64_t capacity_ = 0;
};

}  // namespace tpserve::comm

#endif  // TPSERVE_SERVER_COMM_STAGING_HOST_STAGING_COMMUNICATOR_H_
