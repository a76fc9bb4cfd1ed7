#include "server/coordinator/rendezvous_server.h"

#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tpserve::coordinator {
namespace {

using tpserve::v1::StoreReply;
using tpserve::v1::StoreRequest;

StoreRequest Request(StoreRequest::Op op, const std::string& key, const std::string& value = "",
                     uint32_t timeout_ms = 0) {
  StoreRequest r;
  r.set_id(7);
  r.set_op(op);
  r.set_key(key);
  r.set_value(value);
  r.set_timeout_ms(timeout_ms);
  return r;
}

// Serves `request` and waits for its reply.
StoreReply Ask(RendezvousServer& server, const StoreRequest& request) {
  auto done = std::make_shared<absl::Notification>();
  auto reply = std::make_shared<StoreReply>();
  server.Serve(request, [done, reply](StoreReply r) {
    *reply = std::move(r);
    done->Notify();
  });
  EXPECT_TRUE(done->WaitForNotificationWithTimeout(absl::Seconds(10)));
  return *reply;
}

TEST(RendezvousServerTest, SetAddGetWait) {
  RendezvousServer server;
  EXPECT_EQ(Ask(server, Request(StoreRequest::OP_SET, "gen1/a", "addr")).error(), "");
  const StoreReply got = Ask(server, Request(StoreRequest::OP_GET, "gen1/a", "", 1000));
  EXPECT_EQ(got.id(), 7u);
  EXPECT_EQ(got.value(), "addr");
  EXPECT_EQ(Ask(server, Request(StoreRequest::OP_ADD, "gen1/n", "2")).value(), "2");
  EXPECT_EQ(Ask(server, Request(StoreRequest::OP_ADD, "gen1/n", "3")).value(), "5");
  EXPECT_NE(Ask(server, Request(StoreRequest::OP_ADD, "gen1/n", "x")).error(), "");
  StoreRequest wait = Request(StoreRequest::OP_WAIT, "", "", 1000);
  wait.add_keys("gen1/a");
  EXPECT_EQ(Ask(server, wait).error(), "");
  // A key nobody sets: the GET ends at its timeout with an error.
  EXPECT_NE(Ask(server, Request(StoreRequest::OP_GET, "gen1/none", "", 100)).error(), "");
}

TEST(RendezvousServerTest, RefusesRequestsOutOfBounds) {
  RendezvousServer server;
  EXPECT_EQ(Ask(server, Request(StoreRequest::OP_SET, std::string(2000, 'k'), "v")).error(),
            "StoreRequest: key bytes of 2000 is above 1024");
  EXPECT_EQ(Ask(server, Request(StoreRequest::OP_SET, "k", std::string(100000, 'v'))).error(),
            "StoreRequest: value bytes of 100000 is above 65536");
  EXPECT_EQ(Ask(server, Request(StoreRequest::OP_GET, "k", "", 3600000)).error(),
            "StoreRequest: timeout_ms of 3600000 is above 600000");
  StoreRequest wait = Request(StoreRequest::OP_WAIT, "", "", 1000);
  for (int i = 0; i < 5000; ++i) wait.add_keys("k");
  EXPECT_EQ(Ask(server, wait).error(), "StoreRequest: keys of 5000 is above 4096");
}

TEST(RendezvousServerTest, AnsweredBlockingOperationsDoNotHoldThreads) {
  // A peer's stream of GETs that time out at once: each has a thread of its own while it
  // runs, joined once it has answered (unjoined, they kept their stacks until thread
  // creation failed and the coordinator aborted).
  RendezvousServer server;
  for (int i = 0; i < 3000; ++i) {
    EXPECT_NE(Ask(server, Request(StoreRequest::OP_GET, "gen1/never", "", 0)).error(), "");
    EXPECT_LE(server.threads_held(), 8u) << "after GET " << i;
  }
}

TEST(RendezvousServerTest, TheStoreIsBoundedInBytes) {
  RendezvousServer server;
  const std::string value(60000, 'v');
  int stored = 0;
  std::string error;
  for (int i = 0; i < 2000 && error.empty(); ++i) {
    error = Ask(server, Request(StoreRequest::OP_SET, "gen1/k" + std::to_string(i), value)).error();
    if (error.empty()) ++stored;
  }
  EXPECT_EQ(stored, (64 << 20) / (60000 + 8));
  EXPECT_NE(error.find("would pass the store's limit of 67108864 bytes"), std::string::npos)
      << error;
  // Overwriting a key counts its new size only; erasing a generation frees its bytes.
  EXPECT_EQ(Ask(server, Request(StoreRequest::OP_SET, "gen1/k0", "small")).error(), "");
  server.Close("gen1/");
  server.Open();
  EXPECT_EQ(Ask(server, Request(StoreRequest::OP_SET, "gen2/k", value)).error(), "");
}

TEST(RendezvousServerTest, CloseEndsBlockingOperationsAndErasesTheGeneration) {
  RendezvousServer server;
  Ask(server, Request(StoreRequest::OP_SET, "gen1/a", "old"));
  auto done = std::make_shared<absl::Notification>();
  auto reply = std::make_shared<StoreReply>();
  server.Serve(Request(StoreRequest::OP_GET, "gen1/never", "", 60000), [done, reply](StoreReply r) {
    *reply = std::move(r);
    done->Notify();
  });
  const absl::Time start = absl::Now();
  server.Close("gen1/");
  EXPECT_TRUE(done->HasBeenNotified());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(reply->error(), "the coordinator is tearing the world down");
  EXPECT_EQ(Ask(server, Request(StoreRequest::OP_GET, "gen1/a", "", 100)).error(),
            "the coordinator is tearing the world down");
  server.Open();
  EXPECT_NE(Ask(server, Request(StoreRequest::OP_GET, "gen1/a", "", 100)).error(), "")
      << "the closed generation's keys were erased";
}

}  // namespace
}  // namespace tpserve::coordinator
