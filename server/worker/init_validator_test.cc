#include "server/worker/init_validator.h"

#include <string>

#include "gtest/gtest.h"

namespace tpserve::worker {
namespace {

constexpr InitLimits kLimits = {
    .max_threads = 8, .max_kv_bytes = 1ull << 30, .max_world_size = 16, .max_kv_block_size = 256};

// A valid Init for a world of two, on a file that exists and is readable.
tpserve::v1::Init Valid() {
  tpserve::v1::Init init;
  init.set_model_path(std::string(TPSERVE_SOURCE_DIR) + "/CMakeLists.txt");
  init.set_rank(1);
  init.set_world_size(2);
  init.set_threads(8);
  init.set_kv_budget_bytes(1ull << 30);
  init.set_kv_block_size(16);
  init.set_backend(tpserve::v1::COMM_BACKEND_AUTO);
  return init;
}

std::string Refusal(const tpserve::v1::Init& init, absl::StatusCode code) {
  const absl::Status s = ValidateInit(init, -1, kLimits);
  EXPECT_EQ(s.code(), code) << s;
  return static_cast<std::string>(s.message());
}

TEST(ValidateInitTest, TakesAnInitAtTheLimits) {
  EXPECT_TRUE(ValidateInit(Valid(), -1, kLimits).ok());
}

TEST(ValidateInitTest, RefusesHostileInits) {
  const auto invalid = absl::StatusCode::kInvalidArgument;
  tpserve::v1::Init init = Valid();
  init.set_world_size(0);
  EXPECT_EQ(Refusal(init, invalid), "Init: world_size must be >= 1");
  init = Valid();
  init.set_world_size(17);
  EXPECT_EQ(Refusal(init, invalid), "Init: world_size 17 is above the limit of 16");
  init = Valid();
  init.set_rank(2);
  EXPECT_EQ(Refusal(init, invalid), "Init: rank 2 is out of range for world_size 2");
  init = Valid();
  init.set_threads(9);
  EXPECT_EQ(Refusal(init, invalid), "Init: threads 9 is above the limit of 8");
  init = Valid();
  init.set_kv_budget_bytes(1ull << 62);
  EXPECT_EQ(Refusal(init, invalid),
            "Init: kv_budget_bytes 4611686018427387904 is above the limit of 1073741824");
  init = Valid();
  init.set_kv_block_size(1 << 20);
  EXPECT_EQ(Refusal(init, invalid), "Init: kv_block_size 1048576 is above the limit of 256");
  init = Valid();
  InitLimits clock = kLimits;
  clock.max_coordinator_epoch = 1000;
  init.set_coordinator_epoch(1000);
  EXPECT_TRUE(ValidateInit(init, -1, clock).ok());
  init.set_coordinator_epoch(UINT64_MAX);
  EXPECT_EQ(ValidateInit(init, -1, clock).message(),
            "Init: coordinator_epoch 18446744073709551615 is later than 1000 (this host's clock, "
            "unix ns, plus one hour)");
  init = Valid();
  init.set_comm_host(std::string(300, 'h'));
  EXPECT_EQ(Refusal(init, invalid), "Init: comm_host length 300 is above the limit of 255");
  init = Valid();
  init.set_model_path("");
  EXPECT_EQ(Refusal(init, invalid), "Init: model_path is empty");
  init = Valid();
  init.set_model_path(std::string(5000, 'a'));
  EXPECT_NE(Refusal(init, invalid).find("model_path must be at most 4096 bytes"),
            std::string::npos);
  init = Valid();
  init.set_backend(tpserve::v1::COMM_BACKEND_NCCL);
  EXPECT_FALSE(ValidateInit(init, -1, kLimits).ok());  // a CPU worker has no NCCL
}

TEST(ValidateInitTest, HeartbeatIntervalIsOffOrWithinItsLimits) {
  tpserve::v1::Init init = Valid();
  for (const uint32_t ms : {0u, 10u, 1000u, 60000u}) {
    init.set_heartbeat_interval_ms(ms);
    EXPECT_TRUE(ValidateInit(init, -1, kLimits).ok()) << ms;
  }
  const auto invalid = absl::StatusCode::kInvalidArgument;
  init.set_heartbeat_interval_ms(9);
  EXPECT_EQ(Refusal(init, invalid),
            "Init: heartbeat_interval_ms 9 is below the limit of 10 (0: none)");
  init.set_heartbeat_interval_ms(1);
  EXPECT_EQ(Refusal(init, invalid),
            "Init: heartbeat_interval_ms 1 is below the limit of 10 (0: none)");
  init.set_heartbeat_interval_ms(60001);
  EXPECT_EQ(Refusal(init, invalid),
            "Init: heartbeat_interval_ms 60001 is above the limit of 60000");
  init.set_heartbeat_interval_ms(0xFFFFFFFF);
  EXPECT_EQ(Refusal(init, invalid),
            "Init: heartbeat_interval_ms 4294967295 is above the limit of 60000");
}

TEST(ValidateInitTest, HostLimitsFollowTheHost) {
  const InitLimits host = HostInitLimits();
  EXPECT_GE(host.max_threads, 1u);
  EXPECT_GE(host.max_kv_bytes, 64ull << 20);
  EXPECT_EQ(host.max_world_size, 1024u);
}

}  // namespace
}  // namespace tpserve::worker
