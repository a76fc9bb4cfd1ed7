#include "server/model/weights/safetensors_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model/weights/model_config_test_util.h"

namespace tpserve::model {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeSafetensors;

void Write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

class SafetensorsCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Write(dir_ / "config.json", R"({"architectures":["LlamaForCausalLM"]})");
  }
  fs::path dir_;
};

TEST_F(SafetensorsCheckpointTest, TwoShardIndex) {
  Write(dir_ / "model-00001-of-00002.safetensors",
        MakeSafetensors({{"a", {2}, {1, 2}}, {"b", {1}, {3}}}));
  Write(dir_ / "model-00002-of-00002.safetensors", MakeSafetensors({{"c", {1, 2}, {4, 5}}}));
  Write(dir_ / "model.safetensors.index.json",
        R"({"metadata":{"total_size":20},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
        R"("c":"model-00002-of-00002.safetensors","b":"model-00001-of-00002.safetensors"}})");
  auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->shards().size(), 2u);  // each shard opened once
  EXPECT_THAT((*ckpt)->Names(), ElementsAre("a", "b", "c"));
  EXPECT_THAT((*ckpt)->config_json(), HasSubstr("LlamaForCausalLM"));
  const SafetensorsCheckpoint::Entry* c = (*ckpt)->Find("c");
  ASSERT_NE(c, nullptr);
  float out[2];
  ASSERT_TRUE(c->file->ReadValues(*c->info, 0, 2, out).ok());
  EXPECT_EQ(out[0], 4.0f);
  EXPECT_EQ(out[1], 5.0f);
  EXPECT_EQ((*ckpt)->Find("a")->file, (*ckpt)->Find("b")->file);
  EXPECT_NE((*ckpt)->Find("a")->file, c->file);
}

TEST_F(SafetensorsCheckpointTest, SingleFile) {
  Write(dir_ / "model.safetensors", MakeSafetensors({{"x", {1}, {9}}}));
  auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_THAT((*ckpt)->Names(), ElementsAre("x"));
}

TEST_F(SafetensorsCheckpointTest, MissingShardIsNamed) {
  Write(dir_ / "one.safetensors", MakeSafetensors({{"a", {1}, {1}}}));
  Write(dir_ / "model.safetensors.index.json",
        R"({"weight_map":{"a":"one.safetensors","b":"two.safetensors"}})");
  auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("two.safetensors"));
}

TEST_F(SafetensorsCheckpointTest, TensorMissingFromItsShard) {
  Write(dir_ / "one.safetensors", MakeSafetensors({{"a", {1}, {1}}}));
  Write(dir_ / "model.safetensors.index.json", R"({"weight_map":{"zz":"one.safetensors"}})");
  auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
  EXPECT_THAT(ckpt.status().message(), HasSubstr("\"zz\""));
}

TEST_F(SafetensorsCheckpointTest, ShardPathEscapingIsRefused) {
  Write(dir_ / "model.safetensors.index.json", R"({"weight_map":{"a":"../x.safetensors"}})");
  auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
  EXPECT_THAT(ckpt.status().message(), HasSubstr("not a plain file name"));
}

TEST_F(SafetensorsCheckpointTest, BadIndexAndMissingConfig) {
  Write(dir_ / "model.safetensors.index.json", "{not json");
  EXPECT_THAT(SafetensorsCheckpoint::Open(dir_.string()).status().message(),
              HasSubstr("not valid JSON"));
  fs::remove(dir_ / "config.json");
  EXPECT_THAT(SafetensorsCheckpoint::Open(dir_.string()).status().message(),
              HasSubstr("config.json"));
}

}  // namespace
}  // namespace tpserve::model
