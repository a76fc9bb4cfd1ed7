#include "server/protocol/session_codec.h"

#include <gtest/gtest.h>

namespace tpserve::protocol {
namespace {

WorldAssignment SomeWorld() {
  WorldAssignment w;
  w.model_path = "/models/m.gguf";
  w.rank = 2;
  w.world_size = 3;
  w.backend = tpserve::v1::COMM_BACKEND_SHM;
  w.kv_budget_bytes = uint64_t{5} << 30;
  w.kv_block_size = 16;
  w.world_generation = 41;
  w.comm_host = "10.231.0.2";
  w.comm_timeout = absl::Milliseconds(2500);
  w.threads = 4;
  w.dequantize = true;
  w.float_row_sums = true;
  w.step_link = "/tpserve-shm.step.7";
  return w;
}

TEST(SessionCodecTest, InitRoundTripsEveryField) {
  const WorldAssignment sent = SomeWorld();
  const tpserve::v1::Init init = EncodeInit(sent);
  // Through the wire, as a worker receives it.
  tpserve::v1::Init wire;
  ASSERT_TRUE(wire.ParseFromString(init.SerializeAsString()));
  const WorldAssignment got = DecodeInit(wire);
  EXPECT_EQ(got.model_path, sent.model_path);
  EXPECT_EQ(got.rank, sent.rank);
  EXPECT_EQ(got.world_size, sent.world_size);
  EXPECT_EQ(got.backend, sent.backend);
  EXPECT_EQ(got.kv_budget_bytes, sent.kv_budget_bytes);
  EXPECT_EQ(got.kv_block_size, sent.kv_block_size);
  EXPECT_EQ(got.world_generation, sent.world_generation);
  EXPECT_EQ(got.comm_host, sent.comm_host);
  EXPECT_EQ(got.comm_timeout, sent.comm_timeout);
  EXPECT_EQ(got.threads, sent.threads);
  EXPECT_EQ(got.dequantize, sent.dequantize);
  EXPECT_EQ(got.float_row_sums, sent.float_row_sums);
  EXPECT_EQ(got.step_link, sent.step_link);
}

TEST(SessionCodecTest, AnEmptyInitDecodesToTheDefaults) {
  const WorldAssignment got = DecodeInit(tpserve::v1::Init());
  EXPECT_EQ(got.world_size, 0);  // worker::ValidateInit refuses it before anyone uses it
  EXPECT_EQ(got.comm_timeout, absl::ZeroDuration());
  EXPECT_TRUE(got.step_link.empty());
  EXPECT_FALSE(got.float_row_sums);  // an older coordinator's Init: the canonical path
}

WorkerHoldings SomeHoldings() {
  WorkerHoldings h;
  h.kv_blocks = 4096;
  h.weight_bytes = 96'600'000;
  h.kv_bytes = 33'554'432;
  h.vocab_size = 49152;
  h.comm_backend = "shm";
  h.threads = 1;
  h.step_link = true;
  h.exact_row_sums = true;
  return h;
}

// 32 MiB of KV in blocks of 16 tokens.
const int64_t kMaxBlocks = MaxKvBlocks(33'554'432, 16);

TEST(SessionCodecTest, ReadyRoundTripsEveryField) {
  const WorkerHoldings sent = SomeHoldings();
  tpserve::v1::Ready wire;
  ASSERT_TRUE(wire.ParseFromString(EncodeReady(sent).SerializeAsString()));
  absl::StatusOr<WorkerHoldings> got = DecodeReady(wire, 49152, kMaxBlocks);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kv_blocks, sent.kv_blocks);
  EXPECT_EQ(got->weight_bytes, sent.weight_bytes);
  EXPECT_EQ(got->kv_bytes, sent.kv_bytes);
  EXPECT_EQ(got->vocab_size, sent.vocab_size);
  EXPECT_EQ(got->comm_backend, sent.comm_backend);
  EXPECT_EQ(got->threads, sent.threads);
  EXPECT_EQ(got->step_link, sent.step_link);
  EXPECT_EQ(got->exact_row_sums, sent.exact_row_sums);
  // An unknown vocabulary (0) is not checked.
  EXPECT_TRUE(DecodeReady(wire, 0, kMaxBlocks).ok());
}

TEST(SessionCodecTest, AReadyThatCannotBeTrustedIsRefusedNamingTheField) {
  WorkerHoldings empty_cache = SomeHoldings();
  empty_cache.kv_blocks = 0;
  absl::StatusOr<WorkerHoldings> got = DecodeReady(EncodeReady(empty_cache), 49152, kMaxBlocks);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(got.status().message().find("kv_blocks"), std::string::npos) << got.status();

  // More blocks than the budget can hold (a peer making the coordinator allocate for them).
  WorkerHoldings huge = SomeHoldings();
  huge.kv_blocks = 4'294'967'295;
  got = DecodeReady(EncodeReady(huge), 49152, kMaxBlocks);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(got.status().message().find("kv_blocks 4294967295 exceeds 1048576"), std::string::npos)
      << got.status();
  huge.kv_blocks = kMaxBlocks;
  EXPECT_TRUE(DecodeReady(EncodeReady(huge), 49152, kMaxBlocks).ok());
  EXPECT_EQ(MaxKvBlocks(uint64_t{1} << 62, 16), 2147483647);  // int32 block ids

  got = DecodeReady(EncodeReady(SomeHoldings()), 32000, kMaxBlocks);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(got.status().message().find("vocab_size 49152 where the model has 32000"),
            std::string::npos)
      << got.status();
}

}  // namespace
}  // namespace tpserve::protocol
