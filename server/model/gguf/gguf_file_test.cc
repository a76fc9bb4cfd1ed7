#include "server/model/gguf/gguf_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model/gguf/gguf_test_writer.h"

namespace tpserve::model {
namespace {

using testing::GgufTestWriter;
using ::testing::HasSubstr;
using testing::TestTensor;
using testing::TestValue;

constexpr uint32_t kF32 = 0, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12;

std::string F32Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// A file using every metadata value type, a nested array and two tensors.
GgufTestWriter RichWriter(uint32_t version) {
  GgufTestWriter w(version);
  w.Add("general.architecture", TestValue::Str("llama"))
      .Add("u8", TestValue::U8(200))
      .Add("i8", TestValue::I8(-100))
      .Add("u16", TestValue::U16(60000))
      .Add("i16", TestValue::I16(-30000))
      .Add("u32", TestValue::U32(4000000000u))
      .Add("i32", TestValue::I32(-2000000000))
      .Add("f32", TestValue::F32(1.5f))
      .Add("bool", TestValue::Bool(true))
      .Add("u64", TestValue::U64(std::numeric_limits<uint64_t>::max()))
      .Add("i64", TestValue::I64(-5))
      .Add("f64", TestValue::F64(0.125))
      .Add("tokens",
           TestValue::Array(8, {TestValue::Str("a"), TestValue::Str(""), TestValue::Str("ccc")}))
      .Add("ints", TestValue::Array(5, {TestValue::I32(-1), TestValue::I32(7)}))
      .Add("floats", TestValue::Array(6, {TestValue::F32(0.5f), TestValue::F32(-2.0f)}))
      .Add("nested",
           TestValue::Array(9, {TestValue::Array(4, {TestValue::U32(1)}),
                                TestValue::Array(8, {TestValue::Str("x"), TestValue::Str("yz")}),
                                TestValue::Array(4, {})}));
  w.AddTensor({"norm", {4}, kF32, F32Bytes({1, 2, 3, 4}), {}});
  w.AddTensor({"w", {32, 2}, kQ8_0, std::string(2 * 34, '\x01'), {}});
  return w;
}

absl::Status ParseStatus(const std::string& bytes) { return GgufFile::FromBytes(bytes).status(); }

void ExpectRefused(const std::string& bytes, const std::string& substring) {
  const absl::Status s = ParseStatus(bytes);
  EXPECT_FALSE(s.ok()) << "expected refusal mentioning: " << substring;
  EXPECT_THAT(std::string(s.message()), HasSubstr(substring));
}

class GgufVersionTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufVersionTest, ParsesEveryValueTypeAndTensors) {
  auto f = GgufFile::FromBytes(RichWriter(GetParam()).Build());
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), GetParam());
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.data_offset() % 32, 0u);
  ASSERT_EQ(g.metadata().size(), 16u);
  EXPECT_EQ(g.metadata()[0].first, "general.architecture");  // file order
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(*g.GetUint("u8"), 200u);
  EXPECT_EQ(*g.GetInt("i8"), -100);
  EXPECT_EQ(*g.GetUint("u16"), 60000u);
  EXPECT_EQ(*g.GetInt("i16"), -30000);
  EXPECT_EQ(*g.GetUint("u32"), 4000000000u);
  EXPECT_EQ(*g.GetInt("i32"), -2000000000);
  EXPECT_EQ(*g.GetFloat("f32"), 1.5);
  EXPECT_EQ(*g.GetBool("bool"), true);
  EXPECT_EQ(*g.GetUint("u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*g.GetInt("i64"), -5);
  EXPECT_EQ(*g.GetFloat("f64"), 0.125);
  EXPECT_EQ(*g.GetFloat("u32"), 4000000000.0);  // integers read as floats
  EXPECT_EQ(*g.GetStringArray("tokens"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(*g.GetIntArray("ints"), (std::vector<int64_t>{-1, 7}));
  EXPECT_EQ(*g.GetFloatArray("floats"), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(*g.GetFloatArray("ints"), (std::vector<double>{-1.0, 7.0}));

  const GgufValue* nested = g.Find("nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->type, GgufValueType::kArray);
  EXPECT_EQ(nested->array_type, GgufValueType::kArray);
  const auto& outer = std::get<std::vector<GgufValue>>(nested->value);
  ASSERT_EQ(outer.size(), 3u);
  EXPECT_EQ(outer[0].array_type, GgufValueType::kUint32);
  EXPECT_EQ(std::get<uint64_t>(std::get<std::vector<GgufValue>>(outer[0].value)[0].value), 1u);
  const auto& strs = std::get<std::vector<GgufValue>>(outer[1].value);
  ASSERT_EQ(strs.size(), 2u);
  EXPECT_EQ(std::get<std::string>(strs[1].value), "yz");
  EXPECT_TRUE(std::get<std::vector<GgufValue>>(outer[2].value).empty());

  ASSERT_EQ(g.tensors().size(), 2u);
  const GgufTensorInfo* norm = g.FindTensor("norm");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dims, (std::vector<uint64_t>{4}));
  EXPECT_EQ(norm->type.type, GgmlType::kF32);
  EXPECT_EQ(norm->n_values, 4u);
  EXPECT_EQ(norm->size_bytes, 16u);
  absl::Span<const uint8_t> data = g.TensorData(*norm);
  ASSERT_EQ(data.size(), 16u);
  float v[4];
  std::memcpy(v, data.data(), 16);
  EXPECT_EQ(v[3], 4.0f);
  const GgufTensorInfo* w = g.FindTensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->offset, 32u);
  EXPECT_EQ(w->size_bytes, 68u);
  EXPECT_EQ(g.TensorData(*w)[67], 1);
  EXPECT_EQ(g.FindTensor("missing"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(V2AndV3, GgufVersionTest, ::testing::Values(2u, 3u));

TEST(GgufFileTest, GettersReportMissingKeysAndTypeMismatches) {
  auto f = GgufFile::FromBytes(RichWriter(3).Build());
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.GetString("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(g.GetString("nope").status().message()), HasSubstr("'nope'"));
  const absl::Status s = g.GetString("u32").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'u32' is UINT32, expected STRING"));
  EXPECT_THAT(std::string(g.GetUint("i8").status().message()), HasSubstr("negative"));
  EXPECT_THAT(std::string(g.GetInt("u64").status().message()), HasSubstr("does not fit"));
  EXPECT_FALSE(g.GetBool("u8").ok());
  EXPECT_FALSE(g.GetFloat("general.architecture").ok());
  EXPECT_THAT(std::string(g.GetStringArray("ints").status().message()),
              HasSubstr("ARRAY of INT32, expected ARRAY of STRING"));
  EXPECT_FALSE(g.GetIntArray("tokens").ok());
  EXPECT_FALSE(g.GetIntArray("floats").ok());
  EXPECT_FALSE(g.GetFloatArray("tokens").ok());
  EXPECT_FALSE(g.GetStringArray("u8").ok());
}

TEST(GgufFileTest, RefusesBadMagicAndVersions) {
  GgufTestWriter w;
  w.magic = 0x12345678;
  ExpectRefused(w.Build(), "bad magic");
  ExpectRefused(RichWriter(1).Build(), "unsupported GGUF version 1");
  ExpectRefused(RichWriter(4).Build(), "unsupported GGUF version 4");
  ExpectRefused(RichWriter(0x03000000).Build(), "big-endian");
  ExpectRefused("", "truncated file: magic");
  ExpectRefused("GG", "truncated file: magic");
}

TEST(GgufFileTest, RefusesEveryTruncation) {
  GgufTestWriter w = RichWriter(3);
  const std::string full = w.Build();
  ASSERT_TRUE(ParseStatus(full).ok());
  for (size_t len = 0; len < full.size(); ++len) {
    const absl::Status s = ParseStatus(full.substr(0, len));
    ASSERT_FALSE(s.ok()) << "prefix of " << len << " bytes accepted";
    const std::string m(s.message());
    EXPECT_TRUE(
        m.find("truncated") != std::string::npos || m.find("exceeds") != std::string::npos ||
        m.find("cannot fit") != std::string::npos || m.find("past the end") != std::string::npos)
        << len << ": " << m;
  }
}

TEST(GgufFileTest, RefusesAbsurdCounts) {
  {
    GgufTestWriter w = RichWriter(3);
    w.kv_count = uint64_t{1} << 60;
    ExpectRefused(w.Build(), "metadata kv count 1152921504606846976");
  }
  {
    GgufTestWriter w = RichWriter(3);
    w.tensor_count = uint64_t{1} << 50;
    ExpectRefused(w.Build(), "tensor count 1125899906842624");
  }
  {
    GgufTestWriter w = RichWriter(2);
    w.tensor_count = 5;  // 2 real infos, then the data section is parsed as infos
    EXPECT_FALSE(ParseStatus(w.Build()).ok());
  }
  {
    std::string payload;
    testing::AppendLe<uint32_t>(payload, 4);  // UINT32 elements
    testing::AppendLe<uint64_t>(payload, uint64_t{1} << 40);
    GgufTestWriter w;
    w.Add("big.array", TestValue::Raw(9, payload));
    ExpectRefused(w.Build(), "array length 1099511627776 of metadata key 'big.array'");
  }
  {
    std::string payload;
    testing::AppendLe<uint64_t>(payload, uint64_t{1} << 62);
    GgufTestWriter w;
    w.Add("big.string", TestValue::Raw(8, payload));
    ExpectRefused(w.Build(), "string length 4611686018427387904 of string value of 'big.string'");
  }
  {
    GgufTestWriter w;
    w.kv_count = 1;
    w.pad_data_section = false;
    std::string bytes = w.Build();
    testing::AppendLe<uint64_t>(bytes, 1000);  // key length
    bytes += std::string(20, 'k');
    ExpectRefused(bytes, "string length 1000 of metadata key of metadata entry 0 at offset 24");
  }
}

TEST(GgufFileTest, RefusesDuplicates) {
  GgufTestWriter a;
  a.Add("k", TestValue::U32(1)).Add("k", TestValue::U32(2));
  ExpectRefused(a.Build(), "duplicate metadata key 'k'");
  GgufTestWriter b;
  b.AddTensor({"t", {4}, kF32, F32Bytes({1, 2, 3, 4}), {}});
  b.AddTensor({"t", {4}, kF32, F32Bytes({1, 2, 3, 4}), {}});
  ExpectRefused(b.Build(), "duplicate tensor name 't'");
}

TEST(GgufFileTest, RefusesBadValues) {
  GgufTestWriter a;
  a.Add("weird", TestValue::Raw(13, "\x01\x02\x03\x04"));
  ExpectRefused(a.Build(), "unknown metadata value type 13 for key 'weird'");
  GgufTestWriter b;
  std::string payload;
  testing::AppendLe<uint32_t>(payload, 99);
  testing::AppendLe<uint64_t>(payload, 1);
  b.Add("arr", TestValue::Raw(9, payload + "xxxxxxxx"));
  ExpectRefused(b.Build(), "unknown array element type 99 for metadata key 'arr'");
  GgufTestWriter c;
  c.Add("flag", TestValue::Raw(7, "\x02"));
  ExpectRefused(c.Build(), "invalid bool value 2 for metadata key 'flag'");
  TestValue deep = TestValue::Array(4, {TestValue::U32(1)});
  for (int i = 0; i < kGgufMaxArrayDepth; ++i) deep = TestValue::Array(9, {deep});
  GgufTestWriter d;
  d.Add("deep", deep);
  ExpectRefused(d.Build(), "metadata key 'deep': arrays nested deeper than 8");
}

TEST(GgufFileTest, RefusesBadTensorInfos) {
  auto one = [](TestTensor t) {
    GgufTestWriter w;
    w.AddTensor(std::move(t));
    return w.Build();
  };
  ExpectRefused(one({"t0", {}, kF32, "", {}}), "tensor 't0' has n_dims 0");
  ExpectRefused(one({"t5", {1, 1, 1, 1, 1}, kF32, "1234", {}}), "tensor 't5' has n_dims 5");
  ExpectRefused(one({"tz", {4, 0}, kF32, "", {}}), "tensor 'tz' has a zero dimension (dims[1])");
  ExpectRefused(one({"tov", {uint64_t{1} << 32, uint64_t{1} << 32, 2}, kF32, "", {}}),
                "tensor 'tov' shape overflows");
  ExpectRefused(one({"tbytes", {uint64_t{1} << 62}, kF32, "", {}}),
                "tensor 'tbytes' shape overflows");
  ExpectRefused(one({"tq", {31, 2}, kQ4_0, std::string(64, '\0'), {}}),
                "tensor 'tq' dims[0] = 31 is not a multiple of the Q4_0 block size 32");
  ExpectRefused(one({"tk", {32}, kQ4_K, std::string(144, '\0'), {}}),
                "not a multiple of the Q4_K block size 256");
  ExpectRefused(one({"tt", {4}, 9, "", {}}), "tensor 'tt' at offset");
  ExpectRefused(one({"tt", {4}, 9, "", {}}), "unsupported ggml type code 9");
  ExpectRefused(one({"ta", {4}, kF32, F32Bytes({1, 2, 3, 4}), 8}),
                "tensor 'ta' offset 8 is not a multiple of the alignment 32");
  ExpectRefused(one({"te", {4}, kF32, F32Bytes({1, 2, 3}), {}}),
                "tensor 'te' data (offset 0, 16 bytes");
  ExpectRefused(one({"te", {4}, kF32, F32Bytes({1, 2, 3}), {}}), "extends past the end");
  ExpectRefused(one({"tfar", {4}, kF32, "", uint64_t{1} << 63}), "tensor 'tfar' data");
}

TEST(GgufFileTest, AlignmentKeyIsHonouredAndChecked) {
  GgufTestWriter w;
  w.SetAlignment(64);
  w.AddTensor({"a", {3}, kF32, F32Bytes({1, 2, 3}), {}});
  w.AddTensor({"b", {2}, kF32, F32Bytes({5, 6}), {}});
  auto f = GgufFile::FromBytes(w.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  const GgufTensorInfo* b = (*f)->FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->offset, 64u);
  float v[2];
  std::memcpy(v, (*f)->TensorData(*b).data(), 8);
  EXPECT_EQ(v[0], 5.0f);
  EXPECT_EQ(v[1], 6.0f);

  // With alignment 64 an offset of 32 is misaligned.
  GgufTestWriter m;
  m.SetAlignment(64);
  m.AddTensor({"c", {2}, kF32, F32Bytes({5, 6}), 32});
  ExpectRefused(m.Build(), "tensor 'c' offset 32 is not a multiple of the alignment 64");

  for (uint32_t bad : {0u, 48u, 3u}) {
    GgufTestWriter z;
    z.Add("general.alignment", TestValue::U32(bad));
    ExpectRefused(z.Build(), "'general.alignment' = " + std::to_string(bad) +
                                 " is not a non-zero power of two");
  }
  GgufTestWriter s;
  s.Add("general.alignment", TestValue::Str("32"));
  ExpectRefused(s.Build(), "'general.alignment' is STRING");
}

TEST(GgufFileTest, AcceptsOverlappingTensorsAndTensorlessFiles) {
  GgufTestWriter w;
  w.AddTensor({"a", {4}, kF32, F32Bytes({1, 2, 3, 4}), 0});
  w.AddTensor({"b", {2}, kF32, F32Bytes({1, 2}), 0});
  auto f = GgufFile::FromBytes(w.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->TensorData(*(*f)->FindTensor("b")).data(),
            (*f)->TensorData(*(*f)->FindTensor("a")).data());

  GgufTestWriter empty;
  empty.Add("general.name", TestValue::Str("x"));
  empty.pad_data_section = false;  // a file may end right after its metadata
  auto e = GgufFile::FromBytes(empty.Build());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE((*e)->tensors().empty());
}

TEST(GgufFileTest, OpenMapsAFile) {
  const std::string path =
      ::testing::TempDir() + "/gguf_file_test_" + std::to_string(::getpid()) + ".gguf";
  {
    std::ofstream out(path, std::ios::binary);
    const std::string bytes = RichWriter(3).Build();
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama");
  EXPECT_EQ((*f)->TensorData(*(*f)->FindTensor("w")).size(), 68u);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write("GGUF\x03", 5);
  }
  const absl::Status s = GgufFile::Open(path).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr(path + ": truncated file: version"));
  std::remove(path.c_str());
  EXPECT_EQ(GgufFile::Open(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(GgufFileTest, OpensTheReferenceModel) {
  const std::string path =
      std::string(TPSERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (::access(path.c_str(), R_OK) != 0) GTEST_SKIP() << path << " not present";
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ((*f)->tensors().size(), 272u);
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama");
  EXPECT_EQ(*(*f)->GetUint("llama.embedding_length"), 576u);
  EXPECT_EQ((*f)->GetStringArray("tokenizer.ggml.tokens")->size(), 49152u);
  const GgufTensorInfo* emb = (*f)->FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type.type, GgmlType::kQ8_0);
  EXPECT_EQ(emb->dims, (std::vector<uint64_t>{576, 49152}));
}

}  // namespace
}  // namespace tpserve::model
