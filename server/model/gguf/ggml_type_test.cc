#include "server/model/gguf/ggml_type.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve::model {
namespace {

using ::testing::HasSubstr;

struct Expected {
  uint32_t code;
  GgmlType type;
  const char* name;
  int64_t block_values;
  int64_t block_bytes;
};

TEST(GgmlTypeTest, GeometryMatchesGgml) {
  // Sizes from ggml-common.h: sizeof(block_q4_0) = 2 + 16, block_q4_1 = 4 + 16,
  // block_q5_0 = 2 + 4 + 16, block_q5_1 = 4 + 4 + 16, block_q8_0 = 2 + 32, block_q4_K = 4 + 12 +
  // 128, block_q5_K = 4 + 12 + 32 + 128, block_q6_K = 128 + 64 + 16 + 2.
  const Expected kAll[] = {
      {0, GgmlType::kF32, "F32", 1, 4},        {1, GgmlType::kF16, "F16", 1, 2},
      {2, GgmlType::kQ4_0, "Q4_0", 32, 18},    {3, GgmlType::kQ4_1, "Q4_1", 32, 20},
      {6, GgmlType::kQ5_0, "Q5_0", 32, 22},    {7, GgmlType::kQ5_1, "Q5_1", 32, 24},
      {8, GgmlType::kQ8_0, "Q8_0", 32, 34},    {12, GgmlType::kQ4_K, "Q4_K", 256, 144},
      {13, GgmlType::kQ5_K, "Q5_K", 256, 176}, {14, GgmlType::kQ6_K, "Q6_K", 256, 210},
      {30, GgmlType::kBF16, "BF16", 1, 2},
  };
  for (const Expected& e : kAll) {
    auto info = LookupGgmlType(e.code);
    ASSERT_TRUE(info.ok()) << e.name << ": " << info.status();
    EXPECT_EQ(info->type, e.type);
    EXPECT_EQ(info->name, e.name);
    EXPECT_EQ(info->block_values, e.block_values) << e.name;
    EXPECT_EQ(info->block_bytes, e.block_bytes) << e.name;
  }
}

TEST(GgmlTypeTest, UnsupportedCodesAreNamed) {
  for (uint32_t code : {4u, 5u, 9u, 10u, 11u, 15u, 29u, 31u, 0xFFFFFFFFu}) {
    auto info = LookupGgmlType(code);
    ASSERT_FALSE(info.ok()) << code;
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(info.status().message()),
                HasSubstr("unsupported ggml type code " + std::to_string(code) + " "));
  }
}

TEST(GgmlTypeTest, BytesForValues) {
  const GgmlTypeInfo q4_0 = *LookupGgmlType(2);
  EXPECT_EQ(*BytesForValues(q4_0, 0), 0u);
  EXPECT_EQ(*BytesForValues(q4_0, 64), 36u);
  EXPECT_EQ(*BytesForValues(*LookupGgmlType(14), 512), 420u);
  EXPECT_EQ(*BytesForValues(*LookupGgmlType(0), 3), 12u);
  auto bad = BytesForValues(q4_0, 33);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("blocks of 32"));
  auto overflow = BytesForValues(*LookupGgmlType(0), uint64_t{1} << 62);
  ASSERT_FALSE(overflow.ok());
  EXPECT_THAT(std::string(overflow.status().message()), HasSubstr("overflow"));
  EXPECT_EQ(*BytesForValues(*LookupGgmlType(0), uint64_t{1} << 61), uint64_t{1} << 63);
}

}  // namespace
}  // namespace tpserve::model
