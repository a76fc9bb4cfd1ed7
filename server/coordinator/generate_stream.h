// GenerateStream: the gRPC side of one Generate call — a callback-API write reactor (no
// thread per stream) and the ResponseSink the engine delivers into. Messages queue while a
// write is in flight (one write at a time, as gRPC requires); Close finishes the call once
// the queue has drained. The reactor deletes itself in OnDone; the sink outlives it and then
// drops what arrives. Thread-safe: the engine thread and gRPC's threads meet under mu_.
#ifndef TPSERVE_SERVER_COORDINATOR_GENERATE_STREAM_H_
#define TPSERVE_SERVER_COORDINATOR_GENERATE_STREAM_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "server/coordinator/response_sink.h"

namespace tpserve::coordinator {

class GenerateStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  class Sink final : public ResponseSink {
   public:
    void Send(tpserve::v1::GenerateResponse message) override ABSL_LOCKS_EXCLUDED(mu_);
    void Close(const absl::Status& status) override ABSL_LOCKS_EXCLUDED(mu_);
    bool cancelled() const override { return cancelled_.load(std::memory_order_relaxed); }
    bool deadline_passed() const override { return std::chrono::system_clock::now() >= deadline_; }

   private:
    friend class GenerateStream;
    // Starts the next write, or Finish once closed and drained; at most one op at a time.
    void Pump() ABSL_LOCKS_EXCLUDED(mu_);

    absl::Mutex mu_;
    GenerateStream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // null after OnDone
    std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
    grpc::ByteBuffer writing_ ABSL_GUARDED_BY(mu_);  // the message of the write in flight
    bool busy_ ABSL_GUARDED_BY(mu_) = false;         // a write or the Finish is in flight
    bool finished_ ABSL_GUARDED_BY(mu_) = false;     // Finish was called
    bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
    std::optional<grpc::Status> close_ ABSL_GUARDED_BY(mu_);
    std::atomic<bool> cancelled_{false};
    std::chrono::system_clock::time_point deadline_;  // the client's (max when none)
  };

  explicit GenerateStream(std::chrono::system_clock::time_point deadline);
  std::shared_ptr<Sink> sink() const { return sink_; }
  // Ends the call at once (a request refused before it reached the engine).
  void Refuse(const grpc::Status& status);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  const std::shared_ptr<Sink> sink_;
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_GENERATE_STREAM_H_
