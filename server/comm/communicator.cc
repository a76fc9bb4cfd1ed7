#include "server/comm/communicator.h"

#include <algorithm>

#include "server/common/status_macros.h"

namespace tpserve::comm {

absl::Status Communicator::AllReduceSumInt64(int64_t* data, int64_t count) {
  if (count < 0) return absl::InvalidArgumentError("AllReduceSumInt64: negative count");
  const int world = world_size();
  gathered_.resize(static_cast<size_t>(world * count));
  static_assert(sizeof(int64_t) == 2 * sizeof(float));
  RETURN_IF_ERROR(AllGather(reinterpret_cast<const float*>(data), 2 * count,
                            reinterpret_cast<float*>(gathered_.data())));
  for (int64_t i = 0; i < count; ++i) {
    uint64_t sum = 0;  // unsigned: wrapping is defined, and the same bits as int64's
    for (int r = 0; r < world; ++r) sum += static_cast<uint64_t>(gathered_[r * count + i]);
    data[i] = static_cast<int64_t>(sum);
  }
  return absl::OkStatus();
}

absl::Status SingleRankCommunicator::AllGather(const float* in, int64_t count, float* out) {
  if (in != out) std::copy(in, in + count, out);
  return Check();
}

absl::Status SingleRankCommunicator::Check() const {
  return aborted_ ? absl::AbortedError("communicator aborted") : absl::OkStatus();
}

}  // namespace tpserve::comm
