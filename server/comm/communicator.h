// Communicator: the collectives the tensor-parallel ranks of one world run together
// (all-reduce sum, all-gather, gather to rank 0). Every call is bounded by the timeout the
// communicator was built with and returns DeadlineExceeded (or Aborted after Abort()) rather
// than hanging. Implementations: SingleRankCommunicator (world of one), shared memory (CPU
// ranks on one host), Gloo (CPU, TCP) and NCCL (GPU). One thread drives a communicator at a
// time; Abort() may be called from any thread to unblock it.
//
// Memory: the pointers a collective takes live where the ranks' Backend keeps its tensors (host
// memory for CPU ranks, device memory for GPU ranks). A stream-ordered communicator (NCCL on
// the backend's CUDA stream) only enqueues each collective; Synchronize() then waits, bounded
// by the timeout, until everything enqueued has finished.
#ifndef TPSERVE_SERVER_COMM_COMMUNICATOR_H_
#define TPSERVE_SERVER_COMM_COMMUNICATOR_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace tpserve::comm {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string_view backend_name() const = 0;

  // data[i] = sum over ranks of data[i], for i in [0, count); in place.
  virtual absl::Status AllReduceSum(float* data, int64_t count) = 0;
  // data[i] = sum over ranks of data[i] in int64 (two's complement, wrapping): exact, and the
  // same bits whatever the order the parts are added in; in place. The exact row-parallel sums
  // of the canonical path (kernels/cpu/quant/fixed_sum.h) travel this way. The default, for
  // communicators on host memory, all-gathers the parts (AllGather copies bytes: each int64 as
  // two floats' worth) and adds them here.
  virtual absl::Status AllReduceSumInt64(int64_t* data, int64_t count);
  // out[r * count + i] = in[i] of rank r; out holds world_size() * count values.
  virtual absl::Status AllGather(const float* in, int64_t count, float* out) = 0;
  // On rank 0: out[r * count + i] = in[i] of rank r, as AllGather. Other ranks only send: their
  // `out` may be left untouched (it must still hold world_size() * count values, since the
  // default is AllGather). Communicators that can skip the copies to ranks > 0 override it.
  virtual absl::Status Gather(const float* in, int64_t count, float* out) {
    return AllGather(in, count, out);
  }
  // Waits until every collective issued so far has completed (a no-op for communicators whose
  // collectives return complete). Bounded like a collective.
  virtual absl::Status Synchronize() { return absl::OkStatus(); }
  // Makes pending and future calls fail promptly with Aborted. Thread-safe.
  virtual void Abort() = 0;

 private:
  std::vector<int64_t> gathered_;  // the default AllReduceSumInt64's parts, [world, count]
};

// The world of one rank: every collective is the identity.
class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string_view backend_name() const override { return "local"; }
  absl::Status AllReduceSum(float*, int64_t) override { return Check(); }
  absl::Status AllReduceSumInt64(int64_t*, int64_t) override { return Check(); }
  absl::Status AllGather(const float* in, int64_t count, float* out) override;
  void Abort() override { aborted_ = true; }

 private:
  absl::Status Check() const;
  bool aborted_ = false;
};

}  // namespace tpserve::comm

#endif  // TPSERVE_SERVER_COMM_COMMUNICATOR_H_
