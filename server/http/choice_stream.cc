#include "server/http/choice_stream.h"

#include <utility>

#include "glog/logging.h"

namespace tpserve::http {

class ChoiceStream::ChoiceSink final : public coordinator::ResponseSink {
 public:
  ChoiceSink(std::shared_ptr<ChoiceStream> stream, uint32_t index)
      : stream_(std::move(stream)), index_(index) {}

  void Send(tpserve::v1::GenerateResponse message) override {
    stream_->Push({.index = index_, .message = std::move(message), .closed = absl::OkStatus()});
  }
  void Close(const absl::Status& status) override {
    stream_->Push({.index = index_, .message = std::nullopt, .closed = status});
  }
  bool cancelled() const override { return stream_->cancelled_.load(std::memory_order_relaxed); }

 private:
  const std::shared_ptr<ChoiceStream> stream_;
  const uint32_t index_;
};

ChoiceStream::ChoiceStream(uint32_t choices) : open_(choices) {}

std::shared_ptr<coordinator::ResponseSink> ChoiceStream::Sink(uint32_t index) {
  return std::make_shared<ChoiceSink>(shared_from_this(), index);
}

void ChoiceStream::Abandon(uint32_t index, const absl::Status& status) {
  Push({.index = index, .message = std::nullopt, .closed = status});
}

void ChoiceStream::Push(Event event) {
  absl::MutexLock lock(&mu_);
  if (!event.message.has_value()) {
    CHECK_GT(open_, 0u) << "choice " << event.index << " closed twice";
    --open_;
  }
  events_.push_back(std::move(event));
}

std::optional<ChoiceStream::Event> ChoiceStream::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const auto ready = [this]()
                         ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !events_.empty() || open_ == 0; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (events_.empty()) return std::nullopt;
  Event event = std::move(events_.front());
  events_.pop_front();
  return event;
}

bool ChoiceStream::Done() const {
  absl::MutexLock lock(&mu_);
  return open_ == 0 && events_.empty();
}

}  // namespace tpserve::http
