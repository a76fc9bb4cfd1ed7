// The rendezvous store operations a worker asks of its coordinator on the Session
// (StoreRequest) and their answers (StoreReply), in one place: the worker's StreamStore encodes
// its SET/GET/WAIT/ADD here and the coordinator's RendezvousServer decodes them here, limits
// and all, and answers through EncodeStoreReply. Pure; thread-safe.
#ifndef TPSERVE_SERVER_PROTOCOL_STORE_CODEC_H_
#define TPSERVE_SERVER_PROTOCOL_STORE_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::protocol {

// What a worker may ask. The values exchanged are addresses and identifiers of a few hundred
// bytes: a decoded request holds at most these.
inline constexpr size_t kMaxStoreKeyBytes = 1024;
inline constexpr size_t kMaxStoreValueBytes = 64 * 1024;
inline constexpr int kMaxStoreWaitKeys = 4096;
inline constexpr absl::Duration kMaxStoreTimeout = absl::Minutes(10);

// One store operation.
struct StoreOp {
  tpserve::v1::StoreRequest::Op op = tpserve::v1::StoreRequest::OP_UNSPECIFIED;
  std::string key;                                // SET, GET, ADD (WAIT: a summary of its keys)
  std::string value;                              // SET
  int64_t delta = 0;                              // ADD
  std::vector<std::string> keys;                  // WAIT
  absl::Duration timeout = absl::ZeroDuration();  // GET, WAIT

  static StoreOp Set(std::string key, std::string value);
  static StoreOp Get(std::string key, absl::Duration timeout);
  static StoreOp Wait(std::vector<std::string> keys, absl::Duration timeout);
  static StoreOp Add(std::string key, int64_t delta);
};

// Request `id` (the worker's correlation id) for `op`; timeouts are sent in whole
// milliseconds, clamped to [0, 2^32) ms.
tpserve::v1::StoreRequest EncodeStoreRequest(uint64_t id, const StoreOp& op);
// The operation `request` asks for. InvalidArgument naming the field and the limit: a key,
// value or key count above the limits above, a timeout above kMaxStoreTimeout, an op that is
// none of the four, an ADD value that is not an integer.
absl::StatusOr<StoreOp> DecodeStoreRequest(const tpserve::v1::StoreRequest& request);

// The answer to request `id`: the value (GET, ADD; empty for SET and WAIT), or the error.
tpserve::v1::StoreReply EncodeStoreReply(uint64_t id, const absl::StatusOr<std::string>& outcome);

}  // namespace tpserve::protocol

#endif  // TPSERVE_SERVER_PROTOCOL_STORE_CODEC_H_
