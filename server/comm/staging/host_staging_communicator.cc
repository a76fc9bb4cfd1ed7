#include "server/comm/staging/host_staging_communicator.h"

#include <glog/logging.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "server/common/status_macros.h"

namespace tpserve::comm {

HostStagingCommunicator::HostStagingCommunicator(std::unique_ptr<Communicator> inner,
                                                 cudaStream_t stream)
    : inner_(std::move(inner)), stream_(stream) {}

HostStagingCommunicator::~HostStagingCommunicator() {
  if (staging_ == nullptr) return;
  // Copies still reading the buffer must finish before it goes.
  absl::Status s =
      cuda::CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", __FILE__, __LINE__);
  s.Update(cuda::CudaStatus(cudaFreeHost(staging_), "cudaFreeHost", __FILE__, __LINE__));
  if (!s.ok()) LOG(WARNING) << "host staging communicator: " << s;
}

absl::Status HostStagingCommunicator::Reserve(int64_t count) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("negative count ", count));
  if (count <= capacity_) return absl::OkStatus();
  if (staging_ != nullptr) {
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    CUDA_RETURN_IF_ERROR(cudaFreeHost(staging_));
    staging_ = nullptr;
    capacity_ = 0;
  }
  CUDA_RETURN_IF_ERROR(cudaMallocHost(&staging_, static_cast<size_t>(count) * sizeof(float)));
  capacity_ = count;
  return absl::OkStatus();
}

absl::Status HostStagingCommunicator::ToHost(const float* device, int64_t count) {
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_, device, static_cast<size_t>(count) * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status HostStagingCommunicator::ToDevice(float* device, int64_t count) {
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, staging_, static_cast<size_t>(count) * sizeof(float),
                                       cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status HostStagingCommunicator::AllReduceSum(float* data, int64_t count) {
  RETURN_IF_ERROR(Reserve(count));
  RETURN_IF_ERROR(ToHost(data, count));
  RETURN_IF_ERROR(inner_->AllReduceSum(staging_, count));
  return ToDevice(data, count);
}

// The int64 parts staged as raw bytes (two floats' worth each), added by the inner
// communicator on the host.
absl::Status HostStagingCommunicator::AllReduceSumInt64(int64_t* data, int64_t count) {
  static_assert(sizeof(int64_t) == 2 * sizeof(float));
  float* raw = reinterpret_cast<float*>(data);
  RETURN_IF_ERROR(Reserve(2 * count));
  RETURN_IF_ERROR(ToHost(raw, 2 * count));
  RETURN_IF_ERROR(inner_->AllReduceSumInt64(reinterpret_cast<int64_t*>(staging_), count));
  return ToDevice(raw, 2 * count);
}

absl::Status HostStagingCommunicator::AllGather(const float* in, int64_t count, float* out) {
  return Staged(in, count, out, /*to_every_rank=*/true);
}

absl::Status HostStagingCommunicator::Gather(const float* in, int64_t count, float* out) {
  return Staged(in, count, out, /*to_every_rank=*/false);
}

absl::Status HostStagingCommunicator::Staged(const float* in, int64_t count, float* out,
                                             bool to_every_rank) {
  const int64_t total = count * world_size();
  // staging: [world_size * count]; this rank's values go to their block first.
  RETURN_IF_ERROR(Reserve(total));
  float* mine = staging_ + rank() * count;
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(mine, in, static_cast<size_t>(count) * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (to_every_rank) {
    RETURN_IF_ERROR(inner_->AllGather(mine, count, staging_));
  } else {
    RETURN_IF_ERROR(inner_->Gather(mine, count, staging_));
    if (rank() != 0) return absl::OkStatus();
  }
  return ToDevice(out, total);
}

absl::Status HostStagingCommunicator::Synchronize() {
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return inner_->Synchronize();
}

}  // namespace tpserve::comm
