#include "server/worker/stream_store.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/comm/store.h"

namespace tpserve::worker {
namespace {

using tpserve::v1::StoreReply;
using tpserve::v1::StoreRequest;

// A coordinator stand-in: serves each request from an InMemoryStore on a thread of its own
// and delivers the reply, as the WorkerPool does over the stream.
class FakeCoordinator {
 public:
  ~FakeCoordinator() {
    for (std::thread& t : threads_) t.join();
  }
  StreamStore::SendFn Sender(StreamStore** store) {
    return [this, store](const StoreRequest& request) {
      threads_.emplace_back([this, store, request] { (*store)->Deliver(Serve(request)); });
      return absl::OkStatus();
    };
  }

 private:
  StoreReply Serve(const StoreRequest& request) {
    StoreReply reply;
    reply.set_id(request.id());
    const absl::Duration timeout = absl::Milliseconds(request.timeout_ms());
    absl::Status status;
    if (request.op() == StoreRequest::OP_SET) {
      status = store_.Set(request.key(), request.value());
    } else if (request.op() == StoreRequest::OP_GET) {
      absl::StatusOr<std::string> v = store_.Get(request.key(), timeout);
      status = v.status();
      if (v.ok()) reply.set_value(*v);
    } else if (request.op() == StoreRequest::OP_WAIT) {
      status = store_.Wait({request.keys().begin(), request.keys().end()}, timeout);
    } else {
      absl::StatusOr<int64_t> v = store_.Add(request.key(), std::stoll(request.value()));
      status = v.status();
      if (v.ok()) reply.set_value(std::to_string(*v));
    }
    if (!status.ok()) reply.set_error(status.ToString());
    return reply;
  }

  comm::InMemoryStore store_;
  std::vector<std::thread> threads_;  // only the test thread sends
};

TEST(StreamStoreTest, OperationsRoundTrip) {
  FakeCoordinator coordinator;
  StreamStore* self = nullptr;
  StreamStore store(coordinator.Sender(&self), absl::Seconds(5));
  self = &store;
  ASSERT_TRUE(store.Set("gen1/a", "x").ok());
  EXPECT_EQ(store.Get("gen1/a", absl::Seconds(1)).value(), "x");
  EXPECT_TRUE(store.Wait({"gen1/a"}, absl::Seconds(1)).ok());
  EXPECT_EQ(store.Add("gen1/n", 3).value(), 3);
  EXPECT_EQ(store.Add("gen1/n", -1).value(), 2);
}

TEST(StreamStoreTest, MissingKeyTimesOutNamingTheKey) {
  FakeCoordinator coordinator;
  StreamStore* self = nullptr;
  StreamStore store(coordinator.Sender(&self), absl::Seconds(5));
  self = &store;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> v = store.Get("gen1/missing", absl::Milliseconds(100));
  EXPECT_TRUE(absl::IsDeadlineExceeded(v.status())) << v.status();
  EXPECT_NE(v.status().message().find("gen1/missing"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(StreamStoreTest, NoReplyIsBoundedAndCloseFailsPending) {
  // A coordinator that never answers.
  StreamStore store([](const StoreRequest&) { return absl::OkStatus(); }, absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(store.Set("k", "v")));

  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    store.Close(absl::CancelledError("stream ended"));
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> v = store.Get("k", absl::Seconds(30));
  closer.join();
  EXPECT_TRUE(absl::IsCancelled(v.status())) << v.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(absl::IsCancelled(store.Set("k", "v")));  // closed for good
}

TEST(StreamStoreTest, SendFailureFailsTheOperation) {
  StreamStore store([](const StoreRequest&) { return absl::UnavailableError("broken"); },
                    absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(store.Add("k", 1).status()));
}

}  // namespace
}  // namespace tpserve::worker
