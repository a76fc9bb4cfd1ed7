// Bad GGUF model files are refused with a message naming the tensor, through both read paths
// of the GGUF WeightSource (ReadSlice, which dequantises, and ReadBlocks, which copies the
// stored blocks): non-finite block scales, tensor data running past the end of the file, and
// rows that are not a whole number of blocks. Also ReadBlocks' block-boundary rule, its
// byte-exact happy path and StoredType.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model/gguf/ggml_type.h"
#include "server/model/gguf/gguf_file.h"
#include "server/model/gguf/gguf_test_writer.h"
#include "server/model/weights/weight_source.h"

namespace tpserve::model {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using testing::GgufTestWriter;
using ::testing::HasSubstr;
using testing::TestTensor;
using testing::TestValue;

constexpr uint32_t kF32 = 0, kQ4_1 = 3, kQ8_0 = 8, kQ4_K = 12;
constexpr uint16_t kF16One = 0x3C00, kF16MinusTwo = 0xC000, kF16Half = 0x3800;
constexpr uint16_t kF16NaN = 0x7E00, kF16Inf = 0x7C00, kF16MinusInf = 0xFC00;

// The tensor under test; the model's required tensors are clean F32.
constexpr char kName[] = "blk.0.ffn_down.weight";
constexpr int64_t kD = 32;  // d_model

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// One Q4_1 block (20 bytes): f16 d, f16 m, 16 bytes of nibbles; value j = q_j * d + m with
// q_j = (j * 5 + seed) % 16.
std::string Q4_1Block(uint16_t d, uint16_t m, int seed) {
  std::string b = Bytes(&d, 2) + Bytes(&m, 2);
  for (int j = 0; j < 16; ++j) {
    const int lo = (j * 5 + seed) % 16, hi = ((j + 16) * 5 + seed) % 16;
    b.push_back(static_cast<char>(lo | (hi << 4)));
  }
  return b;
}
float Q4_1Value(float d, float m, int seed, int j) {
  return static_cast<float>((j * 5 + seed) % 16) * d + m;
}

// One Q8_0 block (34 bytes): f16 d, 32 int8 q_j = (j * 7 + seed) % 64 - 32; value q_j * d.
std::string Q8_0Block(uint16_t d, int seed) {
  std::string b = Bytes(&d, 2);
  for (int j = 0; j < 32; ++j) b.push_back(static_cast<char>((j * 7 + seed) % 64 - 32));
  return b;
}

// A 1-layer llama whose token_embd / output_norm are clean F32, plus `extra` tensors.
GgufTestWriter ModelWriter(const std::vector<TestTensor>& extra) {
  GgufTestWriter w;
  w.Add("general.architecture", TestValue::Str("llama"))
      .Add("llama.block_count", TestValue::U32(1))
      .Add("llama.context_length", TestValue::U32(32))
      .Add("llama.embedding_length", TestValue::U32(kD))
      .Add("llama.feed_forward_length", TestValue::U32(64))
      .Add("llama.attention.head_count", TestValue::U32(2))
      .Add("llama.attention.head_count_kv", TestValue::U32(1))
      .Add("llama.vocab_size", TestValue::U32(2));
  std::vector<float> embd(2 * kD, 0.5f), norm(kD, 1.0f);
  w.AddTensor({"token_embd.weight", {kD, 2}, kF32, Bytes(embd.data(), embd.size() * 4), {}});
  w.AddTensor({"output_norm.weight", {kD}, kF32, Bytes(norm.data(), norm.size() * 4), {}});
  for (const TestTensor& t : extra) w.AddTensor(t);
  return w;
}

class WeightSourceValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("weight_source_validation_test_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& image) {
    const std::string path = (dir_ / "m.gguf").string();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << image;
    return path;
  }
  absl::StatusOr<std::unique_ptr<WeightSource>> Open(const std::vector<TestTensor>& extra) {
    return OpenGgufWeightSource(Write(ModelWriter(extra).Build()));
  }

  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------
// 1. Non-finite block scales.

struct BadScaleCase {
  const char* label;
  uint32_t type;
  uint16_t d;  // the bad block's scale
  uint16_t m;  // Q4_1's min (ignored for Q8_0)
  const char* type_name;
};

std::string CaseName(const ::testing::TestParamInfo<BadScaleCase>& info) {
  return info.param.label;
}

class BadScaleTest : public WeightSourceValidationTest,
                     public ::testing::WithParamInterface<BadScaleCase> {
 protected:
  // [3 rows, 64 cols]: 2 blocks a row; only row 1's second block (cols [32, 64)) is bad.
  std::string TensorData() const {
    const BadScaleCase& c = GetParam();
    std::string data;
    for (int r = 0; r < 3; ++r) {
      for (int b = 0; b < 2; ++b) {
        const bool bad = r == 1 && b == 1;
        if (c.type == kQ4_1) {
          data += bad ? Q4_1Block(c.d, c.m, r + b) : Q4_1Block(kF16Half, kF16MinusTwo, r + b);
        } else {
          data += Q8_0Block(bad ? c.d : kF16Half, r + b);
        }
      }
    }
    return data;
  }
};

TEST_P(BadScaleTest, RefusedNamingTheTensorThroughBothReadPaths) {
  const BadScaleCase& c = GetParam();
  auto src = Open({{kName, {64, 3}, c.type, TensorData(), {}}});
  ASSERT_TRUE(src.ok()) << src.status();  // values are only checked when read
  const WeightSource& ws = **src;
  const std::string who = absl::StrCat("weight ", kName, " (", c.type_name, ")");
  const auto refused = [&](const absl::Status& s, const std::string& where) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), AllOf(HasSubstr(who), HasSubstr(where), HasSubstr("non-finite")));
  };

  // ReadSlice (dequantising): the whole tensor, the bad block alone, an unaligned column range
  // inside it, and ReadRows.
  std::vector<float> f(3 * 64);
  refused(ws.ReadSlice(kName, 0, 3, 0, 64, f.data()),
          "row 1 holds a non-finite value at column 32");
  refused(ws.ReadSlice(kName, 1, 2, 32, 64, f.data()), "row 1 holds a non-finite value");
  refused(ws.ReadSlice(kName, 1, 2, 40, 50, f.data()), "row 1 holds a non-finite value");
  refused(ws.ReadSlice(kName, 0, 3, 33, 34, f.data()), "row 1 holds a non-finite value");
  refused(ws.ReadRows(kName, 1, 3, f.data()), "row 1 holds a non-finite value at column 32");

  // ReadBlocks (raw blocks): the whole tensor, and the bad block alone.
  std::vector<uint8_t> b(3 * 2 * 34);
  refused(ws.ReadBlocks(kName, 0, 3, 0, 64, b.data()),
          "row 1 holds a non-finite value at column 32");
  refused(ws.ReadBlocks(kName, 1, 2, 32, 64, b.data()), "row 1 holds a non-finite value");
  refused(ws.ReadBlocks(kName, 0, 2, 0, 64, b.data()), "row 1");

  // The check is per slice read: ranges that miss the bad block still read.
  EXPECT_TRUE(ws.ReadSlice(kName, 0, 1, 0, 64, f.data()).ok());
  EXPECT_TRUE(ws.ReadSlice(kName, 2, 3, 0, 64, f.data()).ok());
  EXPECT_TRUE(ws.ReadSlice(kName, 0, 3, 0, 32, f.data()).ok());
  EXPECT_TRUE(ws.ReadSlice(kName, 1, 2, 3, 29, f.data()).ok());
  EXPECT_TRUE(ws.ReadBlocks(kName, 0, 3, 0, 32, b.data()).ok());
  EXPECT_TRUE(ws.ReadBlocks(kName, 2, 3, 0, 64, b.data()).ok());
}

INSTANTIATE_TEST_SUITE_P(
    Scales, BadScaleTest,
    ::testing::Values(BadScaleCase{"Q4_1_NaN_d", kQ4_1, kF16NaN, kF16MinusTwo, "Q4_1"},
                      BadScaleCase{"Q4_1_Inf_d", kQ4_1, kF16Inf, kF16MinusTwo, "Q4_1"},
                      BadScaleCase{"Q4_1_MinusInf_d", kQ4_1, kF16MinusInf, kF16MinusTwo, "Q4_1"},
                      BadScaleCase{"Q4_1_NaN_m", kQ4_1, kF16Half, kF16NaN, "Q4_1"},
                      BadScaleCase{"Q4_1_Inf_m", kQ4_1, kF16Half, kF16Inf, "Q4_1"},
                      BadScaleCase{"Q8_0_NaN_d", kQ8_0, kF16NaN, 0, "Q8_0"},
                      BadScaleCase{"Q8_0_Inf_d", kQ8_0, kF16Inf, 0, "Q8_0"},
                      BadScaleCase{"Q8_0_MinusInf_d", kQ8_0, kF16MinusInf, 0, "Q8_0"}),
    CaseName);

// ---------------------------------------------------------------------------------------------
// 2. Truncated tensor data: refused when the file is opened (GgufFile's Parse checks every
// tensor's [offset, offset + size) against the file size), naming the tensor.

TEST_F(WeightSourceValidationTest, QuantisedDataRunningPastTheEndIsRefusedAtOpen) {
  // A Q4_1 [3, 64] tensor needs 3 * 2 * 20 = 120 bytes; only 2 blocks are in the file, and it
  // is the last thing in it.
  std::string data;
  for (int b = 0; b < 2; ++b) data += Q4_1Block(kF16One, kF16MinusTwo, b);
  const std::string image = ModelWriter({{kName, {64, 3}, kQ4_1, data, {}}}).Build();
  const std::string path = Write(image);

  auto src = OpenGgufWeightSource(path);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(src.status().message(),
              AllOf(HasSubstr(path), HasSubstr(absl::StrCat("tensor '", kName, "' data")),
                    HasSubstr("120 bytes"), HasSubstr("extends past the end of the file"),
                    HasSubstr(absl::StrCat("(size ", image.size(), ")"))));

  auto file = GgufFile::FromBytes(image);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), AllOf(HasSubstr(absl::StrCat("tensor '", kName, "' data")),
                                             HasSubstr("extends past the end of the file")));

  // One byte short of the full 120 is refused as well; exactly 120 opens.
  std::string full;
  for (int b = 0; b < 6; ++b) full += Q4_1Block(kF16One, kF16MinusTwo, b);
  std::string short_image = ModelWriter({{kName, {64, 3}, kQ4_1, full, {}}}).Build();
  EXPECT_TRUE(OpenGgufWeightSource(Write(short_image)).ok());
  short_image.pop_back();
  EXPECT_THAT(OpenGgufWeightSource(Write(short_image)).status().message(),
              AllOf(HasSubstr(absl::StrCat("tensor '", kName, "' data")),
                    HasSubstr("extends past the end of the file")));
}

TEST_F(WeightSourceValidationTest, DeclaredSizeThatCannotFitIsRefusedAtOpen) {
  // Q8_0 [2^40 rows, 32 cols]: 2^40 * 34 bytes declared, 34 present.
  {
    auto src = Open({{kName, {32, uint64_t{1} << 40}, kQ8_0, Q8_0Block(kF16One, 0), {}}});
    ASSERT_FALSE(src.ok());
    EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(src.status().message(),
                AllOf(HasSubstr(absl::StrCat("tensor '", kName, "' data")),
                      HasSubstr(absl::StrCat((uint64_t{1} << 40) * 34, " bytes")),
                      HasSubstr("extends past the end of the file")));
  }
  // An offset past the end of the file (no data at all).
  {
    auto src = Open({{kName, {64, 1}, kQ4_1, "", uint64_t{1} << 20}});
    ASSERT_FALSE(src.ok());
    EXPECT_THAT(src.status().message(),
                AllOf(HasSubstr(absl::StrCat("tensor '", kName, "' data (offset 1048576")),
                      HasSubstr("extends past the end of the file")));
  }
  // An offset so large that offset + size overflows 64 bits.
  {
    auto src = Open({{kName, {64, 1}, kQ4_1, "", ~uint64_t{0} / 32 * 32}});
    ASSERT_FALSE(src.ok());
    EXPECT_THAT(src.status().message(), AllOf(HasSubstr(absl::StrCat("tensor '", kName, "' data")),
                                              HasSubstr("extends past the end of the file")));
  }
  // A shape whose element count overflows 2^63.
  {
    auto src = Open({{kName, {uint64_t{1} << 32, uint64_t{1} << 32}, kQ4_1, "", {}}});
    ASSERT_FALSE(src.ok());
    EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(src.status().message(),
                HasSubstr(absl::StrCat("tensor '", kName, "' shape overflows")));
  }
  // A shape whose byte count overflows 64 bits (F32: 2^62 values of 4 bytes).
  {
    auto src = Open({{kName, {uint64_t{1} << 31, uint64_t{1} << 31}, kF32, "", {}}});
    ASSERT_FALSE(src.ok());
    EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(src.status().message(),
                AllOf(HasSubstr(absl::StrCat("tensor '", kName, "' shape overflows")),
                      HasSubstr("overflow a 64-bit byte count")));
  }
}

TEST_F(WeightSourceValidationTest, FileCutInsideTheTensorDirectoryNamesTheTensor) {
  std::string data;
  for (int b = 0; b < 2; ++b) data += Q4_1Block(kF16One, kF16MinusTwo, b);
  std::string image = ModelWriter({{kName, {64, 1}, kQ4_1, data, {}}}).Build();
  const size_t at = image.find(kName);
  ASSERT_NE(at, std::string::npos);
  // Keep the name, n_dims and 3 bytes of dims[0].
  image.resize(at + std::strlen(kName) + 4 + 3);
  auto src = OpenGgufWeightSource(Write(image));
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(src.status().message(),
              AllOf(HasSubstr("truncated file: dimension of tensor '"), HasSubstr(kName),
                    HasSubstr("needs 8 bytes but only 3 remain")));
}

// ---------------------------------------------------------------------------------------------
// 3. Rows that are not a whole number of blocks: refused at open by GgufFile's tensor-info
// check (dims[0] % block_values), naming the tensor, before any byte is read.

TEST_F(WeightSourceValidationTest, RowLengthNotAMultipleOfTheBlockIsRefusedAtOpen) {
  struct Case {
    uint32_t type;
    std::vector<uint64_t> dims;
    std::string data;
    std::string want;
  };
  std::string q4_1_2blocks = Q4_1Block(kF16One, kF16MinusTwo, 0) + Q4_1Block(kF16One, 0, 1);
  const std::vector<Case> cases = {
      // 48 values a row: 1.5 blocks.
      {kQ4_1,
       {48, 2},
       q4_1_2blocks + q4_1_2blocks,
       "dims[0] = 48 is not a multiple of the Q4_1 block size 32"},
      // 16 values a row, 4 rows: 64 values in all (a whole number of blocks), but a block would
      // straddle rows.
      {kQ4_1, {16, 4}, q4_1_2blocks, "dims[0] = 16 is not a multiple of the Q4_1 block size 32"},
      // 1-D of 33 values.
      {kQ4_1, {33}, q4_1_2blocks, "dims[0] = 33 is not a multiple of the Q4_1 block size 32"},
      {kQ8_0,
       {40, 1},
       Q8_0Block(kF16One, 0) + Q8_0Block(kF16One, 1),
       "dims[0] = 40 is not a multiple of the Q8_0 block size 32"},
      {kQ4_K,
       {128, 2},
       std::string(144, '\0'),
       "dims[0] = 128 is not a multiple of the Q4_K block size 256"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    const std::string image = ModelWriter({{kName, c.dims, c.type, c.data, {}}}).Build();
    auto src = OpenGgufWeightSource(Write(image));
    ASSERT_FALSE(src.ok());
    EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(src.status().message(),
                AllOf(HasSubstr(absl::StrCat("tensor '", kName, "' ")), HasSubstr(c.want)));
    auto file = GgufFile::FromBytes(image);
    ASSERT_FALSE(file.ok());
    EXPECT_THAT(file.status().message(),
                AllOf(HasSubstr(absl::StrCat("tensor '", kName, "' ")), HasSubstr(c.want)));
  }
}

// ---------------------------------------------------------------------------------------------
// 4. ReadBlocks: block boundaries, exact bytes, StoredType.

TEST_F(WeightSourceValidationTest, ReadBlocksRefusesColumnsOffBlockBoundaries) {
  std::string data;
  for (int i = 0; i < 2 * 3; ++i) data += Q4_1Block(kF16One, kF16MinusTwo, i);
  auto src = Open({{kName, {96, 2}, kQ4_1, data, {}}});
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<uint8_t> out(data.size());
  for (const auto& [cb, ce] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 16}, {16, 64}, {1, 33}, {32, 95}, {31, 32}, {5, 5}}) {
    SCOPED_TRACE(absl::StrCat("[", cb, ", ", ce, ")"));
    const absl::Status s = (*src)->ReadBlocks(kName, 0, 2, cb, ce, out.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), AllOf(HasSubstr(absl::StrCat("weight ", kName)), HasSubstr("block"),
                                   HasSubstr("Q4_1"), HasSubstr("(32)")));
    // ReadSlice decodes whole blocks, so any column range reads.
    std::vector<float> f(2 * 96);
    EXPECT_TRUE((*src)->ReadSlice(kName, 0, 2, cb, ce, f.data()).ok());
  }
  // Range and name errors come before the block check.
  EXPECT_EQ((*src)->ReadBlocks(kName, 0, 3, 0, 32, out.data()).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*src)->ReadBlocks(kName, 0, 1, 64, 128, out.data()).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*src)->ReadBlocks("blk.9.ffn_down.weight", 0, 1, 0, 32, out.data()).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*src)->StoredType("blk.9.ffn_down.weight").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(WeightSourceValidationTest, ReadBlocksReturnsTheFileBytesAndStoredTypeTheFileType) {
  // Q4_1 [3 rows, 96 cols] (3 blocks = 60 bytes a row) and Q8_0 [2 rows, 64 cols] (68 bytes).
  constexpr int64_t kRows = 3, kCols = 96, kRowBytes = 60;
  std::string q4;
  for (int64_t i = 0; i < kRows * kCols / 32; ++i) {
    q4 += Q4_1Block(i % 2 ? kF16One : kF16Half, kF16MinusTwo, static_cast<int>(i));
  }
  std::string q8;
  for (int i = 0; i < 4; ++i) q8 += Q8_0Block(kF16Half, i);
  const char kQ8Name[] = "blk.0.ffn_up.weight";
  auto src = Open({{kName, {kCols, kRows}, kQ4_1, q4, {}}, {kQ8Name, {64, 2}, kQ8_0, q8, {}}});
  ASSERT_TRUE(src.ok()) << src.status();
  const WeightSource& ws = **src;

  auto t = ws.StoredType(kName);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->type, GgmlType::kQ4_1);
  EXPECT_EQ(t->name, "Q4_1");
  EXPECT_EQ(t->block_values, 32);
  EXPECT_EQ(t->block_bytes, 20);
  auto t8 = ws.StoredType(kQ8Name);
  ASSERT_TRUE(t8.ok()) << t8.status();
  EXPECT_EQ(t8->type, GgmlType::kQ8_0);
  EXPECT_EQ(t8->block_bytes, 34);
  auto tf = ws.StoredType("token_embd.weight");
  ASSERT_TRUE(tf.ok()) << tf.status();
  EXPECT_EQ(tf->type, GgmlType::kF32);

  // Every block-aligned row/column range is exactly the file's bytes.
  for (int64_t r0 = 0; r0 < kRows; ++r0) {
    for (int64_t r1 = r0; r1 <= kRows; ++r1) {
      for (int64_t c0 = 0; c0 <= kCols; c0 += 32) {
        for (int64_t c1 = c0; c1 <= kCols; c1 += 32) {
          SCOPED_TRACE(absl::StrCat("rows [", r0, ", ", r1, ") cols [", c0, ", ", c1, ")"));
          const int64_t width = (c1 - c0) / 32 * 20;
          std::string want;
          for (int64_t r = r0; r < r1; ++r) want += q4.substr(r * kRowBytes + c0 / 32 * 20, width);
          std::string got(want.size() + 1, '\x5A');  // one guard byte
          ASSERT_TRUE(
              ws.ReadBlocks(kName, r0, r1, c0, c1, reinterpret_cast<uint8_t*>(got.data())).ok());
          EXPECT_EQ(got.back(), '\x5A') << "wrote past the range";
          got.pop_back();
          EXPECT_EQ(got, want);
        }
      }
    }
  }
  std::string got8(q8.size(), '\0');
  ASSERT_TRUE(ws.ReadBlocks(kQ8Name, 0, 2, 0, 64, reinterpret_cast<uint8_t*>(got8.data())).ok());
  EXPECT_EQ(got8, q8);
  ASSERT_TRUE(ws.ReadBlocks(kQ8Name, 1, 2, 32, 64, reinterpret_cast<uint8_t*>(got8.data())).ok());
  EXPECT_EQ(got8.substr(0, 34), q8.substr(3 * 34, 34));

  // F32 has 1-value blocks: any column range, the raw floats.
  std::vector<float> embd(3, -1.0f);
  ASSERT_TRUE(
      ws.ReadBlocks("token_embd.weight", 1, 2, 5, 8, reinterpret_cast<uint8_t*>(embd.data())).ok());
  EXPECT_EQ(embd, std::vector<float>(3, 0.5f));

  // ReadSlice agrees with the blocks decoded by hand: value j = q_j * d + m.
  std::vector<float> f(kRows * kCols);
  ASSERT_TRUE(ws.ReadSlice(kName, 0, kRows, 0, kCols, f.data()).ok());
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const int64_t i = r * kCols / 32 + c / 32;
      EXPECT_EQ(f[r * kCols + c], Q4_1Value(i % 2 ? 1.0f : 0.5f, -2.0f, static_cast<int>(i),
                                            static_cast<int>(c % 32)))
          << r << "," << c;
    }
  }
}

}  // namespace
}  // namespace tpserve::model
