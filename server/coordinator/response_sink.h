// ResponseSink: where the engine delivers one request's stream — the gRPC reactor in the
// server, a recorder in tests. The engine calls Send for each step's message and then Close
// exactly once; the transport sets cancelled() when the client goes away (cancel or deadline).
// Implementations must be thread-safe: the engine thread calls Send/Close while the
// transport's threads read and cancel.
#ifndef TPSERVE_SERVER_COORDINATOR_RESPONSE_SINK_H_
#define TPSERVE_SERVER_COORDINATOR_RESPONSE_SINK_H_

#include "absl/status/status.h"
#include "tpserve/v1/generate.pb.h"

namespace tpserve::coordinator {

class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  virtual void Send(tpserve::v1::GenerateResponse message) = 0;
  // The end of the stream: OK after the last message (which carries finish_reason), or the
  // error that ended it.
  virtual void Close(const absl::Status& status) = 0;
  virtual bool cancelled() const = 0;
  // When cancelled: whether it was because the client's deadline passed.
  virtual bool deadline_passed() const { return false; }
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_RESPONSE_SINK_H_
