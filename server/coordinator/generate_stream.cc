#include "server/coordinator/generate_stream.h"

#include <string>
#include <utility>

#include "server/common/grpc_status.h"

namespace tpserve::coordinator {

GenerateStream::GenerateStream(std::chrono::system_clock::time_point deadline)
    : sink_(std::make_shared<Sink>()) {
  sink_->deadline_ = deadline;
  absl::MutexLock lock(&sink_->mu_);
  sink_->stream_ = this;
}

void GenerateStream::Sink::Send(tpserve::v1::GenerateResponse message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  {
    absl::MutexLock lock(&mu_);
    if (stream_ == nullptr || write_failed_ || close_.has_value()) return;
    queue_.emplace_back(&slice, 1);
  }
  Pump();
}

void GenerateStream::Sink::Close(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (close_.has_value()) return;
    close_ = ToGrpcStatus(status);
  }
  Pump();
}

void GenerateStream::Sink::Pump() {
  GenerateStream* stream = nullptr;
  grpc::ByteBuffer* write = nullptr;
  grpc::Status finish;
  {
    absl::MutexLock lock(&mu_);
    if (stream_ == nullptr || busy_ || finished_) return;
    if (!queue_.empty()) {
      writing_.Swap(&queue_.front());
      queue_.pop_front();
      write = &writing_;
    } else if (close_.has_value()) {
      finish = *close_;
      finished_ = true;
    } else {
      return;
    }
    busy_ = true;
    stream = stream_;
  }
  // Outside the lock: gRPC may run the reaction inline. The stream stays alive until
  // OnDone, which comes only after Finish.
  if (write != nullptr) {
    stream->StartWrite(write);
  } else {
    stream->Finish(finish);
  }
}

void GenerateStream::Refuse(const grpc::Status& status) {
  {
    absl::MutexLock lock(&sink_->mu_);
    sink_->close_ = status;
  }
  sink_->Pump();
}

void GenerateStream::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&sink_->mu_);
    sink_->busy_ = false;
    if (!ok) {  // the call is gone (cancelled or broken): nothing more will be written
      sink_->write_failed_ = true;
      sink_->queue_.clear();
      sink_->cancelled_.store(true, std::memory_order_relaxed);
    }
  }
  sink_->Pump();
}

void GenerateStream::OnCancel() { sink_->cancelled_.store(true, std::memory_order_relaxed); }

void GenerateStream::OnDone() {
  {
    absl::MutexLock lock(&sink_->mu_);
    sink_->stream_ = nullptr;
  }
  delete this;
}

}  // namespace tpserve::coordinator
