#include "server/protocol/store_codec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpserve::protocol {
namespace {

using tpserve::v1::StoreRequest;

// Encodes `op`, sends it through the wire format and decodes it, as the coordinator does.
StoreOp RoundTrip(const StoreOp& op, uint64_t id = 7) {
  StoreRequest wire;
  EXPECT_TRUE(wire.ParseFromString(EncodeStoreRequest(id, op).SerializeAsString()));
  EXPECT_EQ(wire.id(), id);
  absl::StatusOr<StoreOp> got = DecodeStoreRequest(wire);
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? *got : StoreOp{};
}

TEST(StoreCodecTest, EveryOperationRoundTrips) {
  StoreOp set = RoundTrip(StoreOp::Set("gen3/host/1", "10.231.0.2"));
  EXPECT_EQ(set.op, StoreRequest::OP_SET);
  EXPECT_EQ(set.key, "gen3/host/1");
  EXPECT_EQ(set.value, "10.231.0.2");

  StoreOp get = RoundTrip(StoreOp::Get("gen3/nccl_id", absl::Milliseconds(2500)));
  EXPECT_EQ(get.op, StoreRequest::OP_GET);
  EXPECT_EQ(get.key, "gen3/nccl_id");
  EXPECT_EQ(get.timeout, absl::Milliseconds(2500));

  StoreOp wait = RoundTrip(StoreOp::Wait({"gen3/a", "gen3/b"}, absl::Seconds(30)));
  EXPECT_EQ(wait.op, StoreRequest::OP_WAIT);
  EXPECT_EQ(wait.keys, (std::vector<std::string>{"gen3/a", "gen3/b"}));
  EXPECT_EQ(wait.key, "gen3/a and 1 more");  // for messages
  EXPECT_EQ(wait.timeout, absl::Seconds(30));

  StoreOp add = RoundTrip(StoreOp::Add("gen3/joined", -12));
  EXPECT_EQ(add.op, StoreRequest::OP_ADD);
  EXPECT_EQ(add.delta, -12);
}

TEST(StoreCodecTest, AWaitOfAWholeLargeWorldStaysWithinTheLimits) {
  std::vector<std::string> keys;
  for (int r = 0; r < 1024; ++r) keys.push_back("gen12/host/" + std::to_string(r));
  const StoreOp wait = RoundTrip(StoreOp::Wait(keys, absl::Seconds(30)));
  EXPECT_EQ(wait.keys.size(), 1024u);
  EXPECT_EQ(wait.key, "gen12/host/0 and 1023 more");
}

TEST(StoreCodecTest, TimeoutsAreWholeMillisecondsClampedToTheField) {
  EXPECT_EQ(EncodeStoreRequest(1, StoreOp::Get("k", absl::Microseconds(2900))).timeout_ms(), 2u);
  EXPECT_EQ(EncodeStoreRequest(1, StoreOp::Get("k", -absl::Seconds(1))).timeout_ms(), 0u);
  EXPECT_EQ(EncodeStoreRequest(1, StoreOp::Get("k", absl::Hours(24 * 100))).timeout_ms(),
            UINT32_MAX);
}

TEST(StoreCodecTest, RequestsOutOfBoundsAreRefusedNamingTheFieldAndTheLimit) {
  auto refused = [](const StoreRequest& r) {
    absl::StatusOr<StoreOp> got = DecodeStoreRequest(r);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(got.status().message());
  };
  EXPECT_EQ(refused(EncodeStoreRequest(1, StoreOp::Set(std::string(2000, 'k'), "v"))),
            "StoreRequest: key bytes of 2000 is above 1024");
  EXPECT_EQ(refused(EncodeStoreRequest(1, StoreOp::Set("k", std::string(100000, 'v')))),
            "StoreRequest: value bytes of 100000 is above 65536");
  EXPECT_EQ(refused(EncodeStoreRequest(1, StoreOp::Get("k", absl::Hours(1)))),
            "StoreRequest: timeout_ms of 3600000 is above 600000");
  EXPECT_EQ(refused(EncodeStoreRequest(
                1, StoreOp::Wait(std::vector<std::string>(5000, "k"), absl::Seconds(1)))),
            "StoreRequest: keys of 5000 is above 4096");
  EXPECT_EQ(refused(EncodeStoreRequest(
                1, StoreOp::Wait({"a", std::string(1500, 'k')}, absl::Seconds(1)))),
            "StoreRequest: key bytes of 1500 is above 1024");
  StoreRequest add;
  add.set_op(StoreRequest::OP_ADD);
  add.set_value("x");
  EXPECT_EQ(refused(add), "StoreRequest: ADD value 'x' is not an integer");
  StoreRequest none;
  EXPECT_EQ(refused(none), "StoreRequest: unknown op 0");
}

TEST(StoreCodecTest, RepliesCarryTheValueOrTheError) {
  tpserve::v1::StoreReply ok = EncodeStoreReply(9, std::string("5"));
  EXPECT_EQ(ok.id(), 9u);
  EXPECT_EQ(ok.value(), "5");
  EXPECT_TRUE(ok.error().empty());
  tpserve::v1::StoreReply failed = EncodeStoreReply(9, absl::DeadlineExceededError("not set"));
  EXPECT_EQ(failed.error(), "not set");
  EXPECT_TRUE(failed.value().empty());
}

}  // namespace
}  // namespace tpserve::protocol
