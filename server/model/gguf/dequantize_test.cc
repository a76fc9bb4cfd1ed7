#include "server/model/gguf/dequantize.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model/gguf/gguf_test_writer.h"

namespace tpserve::model {
namespace {

using ::testing::HasSubstr;

// Half-precision bit patterns used in the hand-built blocks.
constexpr uint16_t kHalfQuarter = 0x3400, kHalfHalf = 0x3800, kHalfOne = 0x3C00, kHalfTwo = 0x4000,
                   kHalfMinusOne = 0xBC00;

GgmlTypeInfo Type(GgmlType t) { return *LookupGgmlType(static_cast<uint32_t>(t)); }

void PutU16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); }

std::vector<float> Dequantize(GgmlType t, const std::vector<uint8_t>& bytes, uint64_t n) {
  std::vector<float> out(n, -12345.0f);
  const absl::Status s = DequantizeValues(Type(t), bytes, 0, n, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// Independent reference for half -> float: the IEEE definition evaluated in double (exact
// in float for every finite half); NaNs keep sign and payload.
float HalfReference(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  if (exp == 31) {
    if (mant == 0) return sign ? -INFINITY : INFINITY;
    return std::bit_cast<float>((uint32_t{1} * sign << 31) | 0x7F800000u |
                                (static_cast<uint32_t>(mant) << 13));
  }
  const double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return static_cast<float>(sign ? -v : v);
}

TEST(DequantizeTest, HalfToFloatIsExactForAll65536Values) {
  std::vector<uint8_t> bytes(65536 * 2);
  for (uint32_t h = 0; h < 65536; ++h) {
    PutU16(bytes, 2 * h, static_cast<uint16_t>(h));
    ASSERT_EQ(Bits(F16ToF32(static_cast<uint16_t>(h))), Bits(HalfReference(h))) << std::hex << h;
  }
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x7BFF), 65504.0f);
  EXPECT_EQ(Bits(F16ToF32(0x7C01)), 0x7F802000u);  // signalling NaN stays signalling
  // The bulk kernel (F16C, 8 at a time, with a NaN fix-up), at two alignments so that NaN and
  // non-NaN halves share vectors.
  for (uint64_t first : {0u, 3u}) {
    const uint64_t n = 65536 - first;
    std::vector<float> out(n);
    ASSERT_TRUE(DequantizeValues(Type(GgmlType::kF16), bytes, first, n, out.data()).ok());
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_EQ(Bits(out[i]), Bits(HalfReference(static_cast<uint16_t>(first + i))))
          << std::hex << first + i;
    }
  }
}

TEST(DequantizeTest, Bf16IsExactForAll65536Values) {
  std::vector<uint8_t> bytes(65536 * 2);
  for (uint32_t h = 0; h < 65536; ++h) PutU16(bytes, 2 * h, static_cast<uint16_t>(h));
  const std::vector<float> out = Dequantize(GgmlType::kBF16, bytes, 65536);
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(Bits(out[h]), h << 16) << h;
  EXPECT_EQ(Bf16ToF32(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0xC040), -3.0f);
}

TEST(DequantizeTest, F32IsCopied) {
  const std::vector<float> v = {1.5f, -2.0f, 3.25f, 1e-30f};
  std::vector<uint8_t> bytes(16);
  std::memcpy(bytes.data(), v.data(), 16);
  EXPECT_EQ(Dequantize(GgmlType::kF32, bytes, 4), v);
  float out[2];
  ASSERT_TRUE(DequantizeValues(Type(GgmlType::kF32), bytes, 2, 2, out).ok());
  EXPECT_EQ(out[0], 3.25f);
  EXPECT_EQ(out[1], 1e-30f);
}

TEST(DequantizeTest, Q4_0) {
  // d = 0.5; byte j holds element j in its low nibble (j) and element j+16 in its high
  // nibble (15 - j). value = (q - 8) * d.
  std::vector<uint8_t> b(18);
  PutU16(b, 0, kHalfHalf);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> out = Dequantize(GgmlType::kQ4_0, b, 32);
  EXPECT_EQ(out[0], -4.0f);   // (0 - 8) * 0.5
  EXPECT_EQ(out[8], 0.0f);    // (8 - 8) * 0.5
  EXPECT_EQ(out[15], 3.5f);   // (15 - 8) * 0.5
  EXPECT_EQ(out[16], 3.5f);   // high nibble of byte 0: 15
  EXPECT_EQ(out[31], -4.0f);  // high nibble of byte 15: 0
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], (j - 8) * 0.5f);
    EXPECT_EQ(out[j + 16], (15 - j - 8) * 0.5f);
  }
}

TEST(DequantizeTest, Q4_1) {
  // d = 0.25, m = -1; value = q * d + m.
  std::vector<uint8_t> b(20);
  PutU16(b, 0, kHalfQuarter);
  PutU16(b, 2, kHalfMinusOne);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> out = Dequantize(GgmlType::kQ4_1, b, 32);
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[15], 2.75f);  // 15 * 0.25 - 1
  EXPECT_EQ(out[16], 2.75f);
  EXPECT_EQ(out[31], -1.0f);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(out[j], j * 0.25f - 1.0f);
}

// Q5_0 / Q5_1 blocks' quants for the tests below: qs[j] = j | (15 - j) << 4 and qh = 0xAAAA5555
// (bit j set for even j < 16 and odd j >= 16), so value j < 16 has q = j + 16 (j even) and value
// 16 + j has q = 15 - j + 16 (j odd).
int FiveBitQuant(int v) {
  const int low = v < 16 ? v : 15 - (v - 16);
  const bool high = v < 16 ? v % 2 == 0 : v % 2 == 1;
  return low + (high ? 16 : 0);
}
void PutFiveBits(std::vector<uint8_t>& b, size_t qh_at) {
  PutU16(b, qh_at, 0x5555);
  PutU16(b, qh_at + 2, 0xAAAA);
  for (int j = 0; j < 16; ++j) b[qh_at + 4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
}

TEST(DequantizeTest, Q5_0) {
  // d = 0.5; value = (q - 16) * d.
  std::vector<uint8_t> b(22);
  PutU16(b, 0, kHalfHalf);
  PutFiveBits(b, 2);
  const std::vector<float> out = Dequantize(GgmlType::kQ5_0, b, 32);
  EXPECT_EQ(out[0], 0.0f);    // q = 0 + 16
  EXPECT_EQ(out[1], -7.5f);   // q = 1
  EXPECT_EQ(out[16], -0.5f);  // q = 15
  EXPECT_EQ(out[17], 7.0f);   // q = 14 + 16
  for (int v = 0; v < 32; ++v) EXPECT_EQ(out[v], (FiveBitQuant(v) - 16) * 0.5f) << v;
}

TEST(DequantizeTest, Q5_1) {
  // d = 0.25, m = -1; value = q * d + m.
  std::vector<uint8_t> b(24);
  PutU16(b, 0, kHalfQuarter);
  PutU16(b, 2, kHalfMinusOne);
  PutFiveBits(b, 4);
  const std::vector<float> out = Dequantize(GgmlType::kQ5_1, b, 32);
  EXPECT_EQ(out[0], 3.0f);    // 16 * 0.25 - 1
  EXPECT_EQ(out[1], -0.75f);  // 1 * 0.25 - 1
  EXPECT_EQ(out[17], 6.5f);   // 30 * 0.25 - 1
  for (int v = 0; v < 32; ++v) EXPECT_EQ(out[v], FiveBitQuant(v) * 0.25f - 1.0f) << v;
}

TEST(DequantizeTest, Q8_0) {
  // d = 2; int8 qs = -128, -120, ..., value = q * d.
  std::vector<uint8_t> b(2 * 34);
  PutU16(b, 0, kHalfTwo);
  PutU16(b, 34, kHalfMinusOne);
  for (int j = 0; j < 32; ++j) {
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(-128 + 8 * j));
    b[36 + j] = static_cast<uint8_t>(j);
  }
  const std::vector<float> out = Dequantize(GgmlType::kQ8_0, b, 64);
  EXPECT_EQ(out[0], -256.0f);
  EXPECT_EQ(out[31], 240.0f);  // (-128 + 248) * 2
  EXPECT_EQ(out[33], -1.0f);   // second block, d = -1
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[32 + j], -static_cast<float>(j));
}

// The 12 packed scale bytes of a Q4_K/Q5_K super-block, as ggml's quantize_row_q4_K_ref
// packs them (the kernel's unpacking is the inverse).
std::vector<uint8_t> PackScalesK4(const int sc[8], const int mn[8]) {
  std::vector<uint8_t> s(12, 0);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = static_cast<uint8_t>(sc[j]);
      s[j + 4] = static_cast<uint8_t>(mn[j]);
    } else {
      s[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
      s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      s[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
    }
  }
  return s;
}

constexpr int kSc[8] = {1, 2, 3, 4, 40, 50, 60, 63};  // >= 16 exercises the packed top bits
constexpr int kMn[8] = {0, 1, 2, 3, 17, 33, 49, 63};

TEST(DequantizeTest, Q4_K) {
  // d = 0.5, dmin = 0.25. Values 64c .. 64c+31 take the low nibbles of qs[32c .. 32c+32)
  // with sub-block 2c, values 64c+32 .. 64c+63 their high nibbles with sub-block 2c+1.
  std::vector<uint8_t> b(144);
  PutU16(b, 0, kHalfHalf);
  PutU16(b, 2, kHalfQuarter);
  const std::vector<uint8_t> scales = PackScalesK4(kSc, kMn);
  std::copy(scales.begin(), scales.end(), b.begin() + 4);
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i % 16) | ((i * 7 % 16) << 4));
  const std::vector<float> out = Dequantize(GgmlType::kQ4_K, b, 256);
  EXPECT_EQ(out[0], -0.0f);                      // 0.5 * 1 * 0 - 0.25 * 0
  EXPECT_EQ(out[33], 0.5f * 2 * 7 - 0.25f * 1);  // high nibble of qs[1] = 7, sub-block 1
  EXPECT_EQ(out[255], 0.5f * 63 * (127 * 7 % 16) - 0.25f * 63);  // qs[127] high, sub 7
  for (int e = 0; e < 256; ++e) {
    const int chunk = e / 64, w = e % 64, sub = 2 * chunk + w / 32, l = w % 32;
    const uint8_t byte = b[16 + 32 * chunk + l];
    const int q = w < 32 ? (byte & 0xF) : (byte >> 4);
    const float d1 = 0.5f * kSc[sub], m1 = 0.25f * kMn[sub];
    ASSERT_EQ(out[e], d1 * q - m1) << e;
  }
}

TEST(DequantizeTest, Q5_K) {
  // As Q4_K, plus a fifth bit: value 64c + w takes bit (2c + w / 32) of qh[w % 32].
  std::vector<uint8_t> b(176);
  PutU16(b, 0, kHalfHalf);
  PutU16(b, 2, kHalfQuarter);
  const std::vector<uint8_t> scales = PackScalesK4(kSc, kMn);
  std::copy(scales.begin(), scales.end(), b.begin() + 4);
  for (int l = 0; l < 32; ++l) b[16 + l] = static_cast<uint8_t>(l * 37 + 11);
  for (int i = 0; i < 128; ++i) b[48 + i] = static_cast<uint8_t>((i % 16) | ((i * 5 % 16) << 4));
  const std::vector<float> out = Dequantize(GgmlType::kQ5_K, b, 256);
  // qh[0] = 11 = 0b1011: bit 0 set, so value 0 = 0.5 * 1 * (0 + 16) - 0 = 8.
  EXPECT_EQ(out[0], 8.0f);
  // value 64: chunk 1, bit 2 of qh[0] (clear), nibble qs[32] & 0xF = 0 -> -0.25 * 2.
  EXPECT_EQ(out[64], -0.5f);
  for (int e = 0; e < 256; ++e) {
    const int chunk = e / 64, w = e % 64, sub = 2 * chunk + w / 32, l = w % 32;
    const uint8_t byte = b[48 + 32 * chunk + l];
    const int hi_bit = (b[16 + l] >> sub) & 1;
    const int q = (w < 32 ? (byte & 0xF) : (byte >> 4)) + 16 * hi_bit;
    const float d1 = 0.5f * kSc[sub], m1 = 0.25f * kMn[sub];
    ASSERT_EQ(out[e], d1 * q - m1) << e;
  }
}

TEST(DequantizeTest, Q6_K) {
  // ql[128] low nibbles, qh[64] 2-bit highs, int8 scales[16], d. Half h, index w in the half:
  // quadrant = w / 32, l = w % 32; low nibble from ql[64h + l + 32 * (quadrant & 1)] (low
  // nibble for quadrants 0-1, high for 2-3), high bits (qh[32h + l] >> 2 * quadrant) & 3;
  // value = d * scales[8h + w / 16] * (q - 32).
  std::vector<uint8_t> b(210);
  for (int i = 0; i < 128; ++i) b[i] = static_cast<uint8_t>(i * 13 + 5);
  for (int i = 0; i < 64; ++i) b[128 + i] = static_cast<uint8_t>(i * 29 + 3);
  for (int i = 0; i < 16; ++i) b[192 + i] = static_cast<uint8_t>(static_cast<int8_t>(i * 9 - 70));
  PutU16(b, 208, kHalfHalf);
  const std::vector<float> out = Dequantize(GgmlType::kQ6_K, b, 256);
  // value 0: ql[0] = 5 -> low 5; qh[0] = 3 -> bits 0-1 = 3; q = 5 | 48 = 53;
  // 0.5 * -70 * (53 - 32) = -735.
  EXPECT_EQ(out[0], -735.0f);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, w = e % 128, quadrant = w / 32, l = w % 32;
    const uint8_t lbyte = b[64 * h + l + 32 * (quadrant & 1)];
    const int low = quadrant < 2 ? (lbyte & 0xF) : (lbyte >> 4);
    const int high = (b[128 + 32 * h + l] >> (2 * quadrant)) & 3;
    const float ds = 0.5f * static_cast<int8_t>(b[192 + 8 * h + w / 16]);
    ASSERT_EQ(out[e], ds * ((low | (high << 4)) - 32)) << e;
  }
}

TEST(DequantizeTest, ValuesAreBoundsChecked) {
  const GgmlTypeInfo q4_0 = Type(GgmlType::kQ4_0);
  std::vector<uint8_t> b(36);
  std::vector<float> out(64);
  absl::Status s = DequantizeValues(q4_0, b, 16, 32, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Q4_0 block size 32"));
  s = DequantizeValues(q4_0, b, 32, 64, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  s = DequantizeValues(q4_0, b, ~uint64_t{0} / 32 * 32, 32, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(DequantizeValues(q4_0, b, 32, 32, out.data()).ok());
  GgmlTypeInfo forged = q4_0;
  forged.block_bytes = 1;
  EXPECT_FALSE(DequantizeValues(forged, b, 0, 32, out.data()).ok());
}

class SliceTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(SliceTest, SliceEqualsPartOfTheWholeTensor) {
  const GgmlTypeInfo t = Type(GetParam());
  const int64_t bv = t.block_values;
  const int64_t row_len = bv == 1 ? 40 : 4 * bv, rows = 5;
  std::vector<uint8_t> bytes(rows * (row_len / bv) * t.block_bytes);
  std::mt19937 rng(42);
  for (uint8_t& x : bytes) x = static_cast<uint8_t>(rng());
  std::vector<float> whole(rows * row_len);
  ASSERT_TRUE(DequantizeValues(t, bytes, 0, whole.size(), whole.data()).ok());
  const int64_t r0 = 1, r1 = 4, c0 = bv == 1 ? 3 : bv, c1 = bv == 1 ? 17 : 3 * bv;
  std::vector<float> part((r1 - r0) * (c1 - c0));
  ASSERT_TRUE(DequantizeSlice(t, bytes, row_len, r0, r1, c0, c1, part.data()).ok());
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) {
      ASSERT_EQ(Bits(part[(r - r0) * (c1 - c0) + (c - c0)]), Bits(whole[r * row_len + c]))
          << t.name << " row " << r << " col " << c;
    }
  }
  // Whole rows through the slice API equal the whole tensor.
  std::vector<float> all(whole.size());
  ASSERT_TRUE(DequantizeSlice(t, bytes, row_len, 0, rows, 0, row_len, all.data()).ok());
  EXPECT_EQ(std::memcmp(all.data(), whole.data(), all.size() * 4), 0);
  // Rows past the data.
  EXPECT_EQ(DequantizeSlice(t, bytes, row_len, 0, rows + 1, 0, row_len, all.data()).code(),
            absl::StatusCode::kOutOfRange);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SliceTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                           GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                                           GgmlType::kQ5_K, GgmlType::kQ6_K));

TEST(DequantizeTest, SliceArgumentsAreChecked) {
  const GgmlTypeInfo q6k = Type(GgmlType::kQ6_K);
  std::vector<uint8_t> bytes(4 * 210);
  std::vector<float> out(4 * 512);
  absl::Status s = DequantizeSlice(q6k, bytes, 512, 0, 1, 128, 512, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("block size 256"));
  s = DequantizeSlice(q6k, bytes, 500, 0, 1, 0, 256, out.data());
  EXPECT_THAT(std::string(s.message()), HasSubstr("row length 500"));
  EXPECT_FALSE(DequantizeSlice(q6k, bytes, 512, 2, 1, 0, 256, out.data()).ok());
  EXPECT_FALSE(DequantizeSlice(q6k, bytes, 512, -1, 1, 0, 256, out.data()).ok());
  EXPECT_FALSE(DequantizeSlice(q6k, bytes, 512, 0, 1, 256, 768, out.data()).ok());
  EXPECT_TRUE(DequantizeSlice(q6k, bytes, 512, 0, 2, 256, 512, out.data()).ok());
  EXPECT_TRUE(DequantizeSlice(q6k, bytes, 512, 1, 1, 0, 512, nullptr).ok());  // empty
}

TEST(DequantizeTest, TensorRowsOfAGgufFile) {
  // m: Q8_0, dims {64, 3, 2} -> 6 rows of 64 (2 blocks each); block k of row r has d = 1 and
  // qs[j] = 10 * r + k, so every value of row r's block k is 10r + k.
  std::string m;
  for (int r = 0; r < 6; ++r) {
    for (int k = 0; k < 2; ++k) {
      testing::AppendLe<uint16_t>(m, kHalfOne);
      m += std::string(32, static_cast<char>(10 * r + k));
    }
  }
  testing::GgufTestWriter w;
  w.AddTensor({"m", {64, 3, 2}, 8, m, {}});
  w.AddTensor({"v", {3}, 0, std::string("\0\0\x80\x3f\0\0\0\x40\0\0\x40\x40", 12), {}});
  auto f = GgufFile::FromBytes(w.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufTensorInfo& mi = *(*f)->FindTensor("m");
  EXPECT_EQ(TensorRowCount(mi), 6);
  auto rows = DequantizeTensorRows(**f, mi, 2, 5);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u * 64);
  for (int r = 2; r < 5; ++r) {
    for (int c = 0; c < 64; ++c) ASSERT_EQ((*rows)[(r - 2) * 64 + c], 10 * r + c / 32);
  }
  const GgufTensorInfo& vi = *(*f)->FindTensor("v");
  auto v = DequantizeTensorRows(**f, vi, 0, 1);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  const absl::Status s = DequantizeTensorRows(**f, mi, 0, 7).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tensor 'm' with 6 rows"));
  GgufTensorInfo copy = mi;
  EXPECT_FALSE(DequantizeTensorRows(**f, copy, 0, 1).ok());
}

}  // namespace
}  // namespace tpserve::model
