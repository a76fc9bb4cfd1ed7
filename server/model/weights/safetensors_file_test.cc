#include "server/model/weights/safetensors_file.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model/weights/model_config_test_util.h"

namespace tpserve::model {
namespace {

using ::testing::HasSubstr;
using testing::MakeSafetensors;
using testing::SafetensorsBytes;

TEST(SafetensorsFileTest, ReadsF32F16Bf16AndMetadata) {
  // a: F32 [2, 2]; b: F16 [3] = {1, -2, 0.5}; c: BF16 [2] = {1, -3}; d: I64 [1].
  std::string data;
  const float a[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  data.append(reinterpret_cast<const char*>(a), sizeof(a));
  const uint16_t b[3] = {0x3c00, 0xc000, 0x3800};
  data.append(reinterpret_cast<const char*>(b), sizeof(b));
  const uint16_t c[2] = {0x3f80, 0xc040};
  data.append(reinterpret_cast<const char*>(c), sizeof(c));
  const int64_t d = 7;
  data.append(reinterpret_cast<const char*>(&d), sizeof(d));
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F16","shape":[3],"data_offsets":[16,22]},)"
                             R"("c":{"dtype":"BF16","shape":[2],"data_offsets":[22,26]},)"
                             R"("d":{"dtype":"I64","shape":[1],"data_offsets":[26,34]}})";
  auto file = SafetensorsFile::FromBytes(SafetensorsBytes(header, data));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  ASSERT_EQ((*file)->tensors().size(), 4u);

  const SafetensorsTensorInfo* ta = (*file)->Find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 2}));
  float out[4];
  ASSERT_TRUE((*file)->ReadValues(*ta, 1, 3, out).ok());
  EXPECT_EQ(out[0], -2.0f);
  EXPECT_EQ(out[1], 3.25f);
  EXPECT_EQ(out[2], 0.0f);

  ASSERT_TRUE((*file)->ReadValues(*(*file)->Find("b"), 0, 3, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.5f);
  ASSERT_TRUE((*file)->ReadValues(*(*file)->Find("c"), 0, 2, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);

  // Listed, but refused on read with a message naming the dtype.
  const absl::Status s = (*file)->ReadValues(*(*file)->Find("d"), 0, 1, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("I64"));
  // Past the end.
  EXPECT_EQ((*file)->ReadValues(*ta, 2, 3, out).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*file)->Find("missing"), nullptr);
}

TEST(SafetensorsFileTest, F16SubnormalAndInfinity) {
  const uint16_t v[3] = {0x0001, 0x7c00, 0x8400};  // 2^-24, +inf, -2^-14
  const std::string data(reinterpret_cast<const char*>(v), sizeof(v));
  auto file = SafetensorsFile::FromBytes(
      SafetensorsBytes(R"({"x":{"dtype":"F16","shape":[3],"data_offsets":[0,6]}})", data));
  ASSERT_TRUE(file.ok()) << file.status();
  float out[3];
  ASSERT_TRUE((*file)->ReadValues((*file)->tensors()[0], 0, 3, out).ok());
  EXPECT_EQ(out[0], 5.9604644775390625e-08f);
  EXPECT_TRUE(std::isinf(out[1]) && out[1] > 0);
  EXPECT_EQ(out[2], -6.103515625e-05f);
}

TEST(SafetensorsFileTest, RoundTripsBuilderOutput) {
  auto file = SafetensorsFile::FromBytes(
      MakeSafetensors({{"w", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"n", {3}, {7, 8, 9}}}));
  ASSERT_TRUE(file.ok()) << file.status();
  float out[3];
  ASSERT_TRUE((*file)->ReadValues(*(*file)->Find("n"), 0, 3, out).ok());
  EXPECT_EQ(out[2], 9.0f);
}

struct Malformed {
  const char* name;
  std::string bytes;
  const char* message;
};

std::string LengthOnly(uint64_t n) {
  return std::string(reinterpret_cast<const char*>(&n), 8) + "{}";
}

std::vector<Malformed> MalformedCases() {
  const std::string f32x2(8, '\0');
  return {
      {"TooShort", std::string("\x02\x00\x00", 3), "too short"},
      {"HeaderLargerThanFile", LengthOnly(4096), "larger than the file"},
      {"AbsurdHeaderLength", LengthOnly(uint64_t{1} << 40), "absurd"},
      {"Truncated",
       SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"),
       "out of range"},
      {"BadJson", SafetensorsBytes(R"({"x":{"dtype":"F32",)", ""), "not valid JSON"},
      {"NotAnObject", SafetensorsBytes("[1,2]", ""), "not a JSON object"},
      {"OffsetsOutOfRange",
       SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}})", f32x2),
       "out of range"},
      {"OffsetsReversed",
       SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", f32x2),
       "out of range"},
      {"ShapeDtypeMismatch",
       SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32x2),
       "needs 3 x 4"},
      {"Overlapping",
       SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                        f32x2),
       "overlaps"},
      {"Gap", SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32x2),
       "not contiguous"},
      {"TrailingBytes",
       SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32x2),
       "trailing bytes"},
      {"Duplicate",
       SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                        f32x2),
       "duplicate key \"x\""},
      {"NegativeShape",
       SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32x2),
       "negative shape"},
      {"FloatShape",
       SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", f32x2),
       "non-negative integer"},
      {"OverflowingShape",
       SafetensorsBytes(
           R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", f32x2),
       "overflows"},
      {"MissingDtype", SafetensorsBytes(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", f32x2),
       "dtype"},
      {"BadOffsets",
       SafetensorsBytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", f32x2),
       "data_offsets"},
      {"BadMetadata", SafetensorsBytes(R"({"__metadata__":{"k":1}})", ""), "not a string"},
  };
}

class SafetensorsMalformedTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(SafetensorsMalformedTest, IsRefusedWithANamedProblem) {
  const auto file = SafetensorsFile::FromBytes(GetParam().bytes);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(All, SafetensorsMalformedTest, ::testing::ValuesIn(MalformedCases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SafetensorsFileTest, OpenNamesPathAndMissingFile) {
  const auto missing = SafetensorsFile::Open("/nonexistent/model.safetensors");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/model.safetensors"));
}

}  // namespace
}  // namespace tpserve::model
