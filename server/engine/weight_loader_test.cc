// WeightLoader on the CPU backend, from an in-memory WeightSource of stored blocks: a matrix
// whose parts share a type and fall on its blocks is held as those very bytes; a split inside
// a block, or fused parts of different types, is re-quantised to Q8_0 (close to the source's
// values); exact mode and f32 sources give the dequantised f32 values; rows past the parts
// are zero. A load is abandoned, with Cancelled, at the first tensor or chunk of one after
// its cancel callback says so, and a large tensor read in chunks comes through whole.
#include "server/engine/weight_loader.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/quant/weight_layout.h"
#include "server/engine/cpu_backend.h"
#include "server/model/gguf/dequantize.h"

namespace tpserve::engine {
namespace {

// Tensors held as blocks of a stored type; ReadSlice dequantises through server/model.
class BlockSource final : public model::WeightSource {
 public:
  struct Stored {
    model::GgmlTypeInfo type;
    model::WeightShape shape;
    std::vector<uint8_t> bytes;  // [rows, row bytes]
  };

  void Add(const std::string& name, model::GgmlType type, int64_t rows, int64_t cols,
           uint32_t seed) {
    Stored s{*model::LookupGgmlType(static_cast<uint32_t>(type)), {rows, cols}, {}};
    const int64_t row_bytes = cols / s.type.block_values * s.type.block_bytes;
    s.bytes.resize(static_cast<size_t>(rows * row_bytes));
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    if (type == model::GgmlType::kF32) {
      auto* f = reinterpret_cast<float*>(s.bytes.data());
      for (int64_t i = 0; i < rows * cols; ++i) f[i] = value(gen);
    } else {
      // Quantise random values to Q8_0 first; other types get random quants with sane
      // f16 scales (d = 0.01, m = -0.08 for Q4_1).
      if (type == model::GgmlType::kQ8_0) {
        std::vector<float> v(static_cast<size_t>(rows * cols));
        for (float& x : v) x = value(gen);
        kernels::cpu::QuantizeQ8_0(v.data(), rows * cols / 32, s.bytes.data());
      } else {
        ASSERT_EQ(type, model::GgmlType::kQ4_1);
        std::uniform_int_distribution<int> byte(0, 255);
        for (size_t b = 0; b < s.bytes.size(); b += 20) {
          const uint16_t d = 0x211F, m = 0xAD1F;  // ~0.01, ~-0.08
          std::memcpy(&s.bytes[b], &d, 2);
          std::memcpy(&s.bytes[b + 2], &m, 2);
          for (int j = 4; j < 20; ++j) s.bytes[b + j] = static_cast<uint8_t>(byte(gen));
        }
      }
    }
    tensors_[name] = std::move(s);
  }

  std::string_view format() const override { return "blocks"; }
  const model::ModelConfig& config() const override { return config_; }
  std::vector<std::string> Names() const override {
    std::vector<std::string> names;
    for (const auto& [name, s] : tensors_) names.push_back(name);
    return names;
  }
  bool Has(std::string_view name) const override { return tensors_.count(std::string(name)); }
  absl::StatusOr<model::WeightShape> Shape(std::string_view name) const override {
    return At(name).shape;
  }
  absl::StatusOr<model::GgmlTypeInfo> StoredType(std::string_view name) const override {
    return At(name).type;
  }
  absl::Status ReadSlice(std::string_view name, int64_t row_begin, int64_t row_end,
                         int64_t col_begin, int64_t col_end, float* out) const override {
    Read();
    const Stored& s = At(name);
    std::vector<float> all(static_cast<size_t>(s.shape.rows * s.shape.cols));
    absl::Status st =
        model::DequantizeValues(s.type, s.bytes, 0, s.shape.rows * s.shape.cols, all.data());
    if (!st.ok()) return st;
    for (int64_t r = row_begin; r < row_end; ++r) {
      for (int64_t c = col_begin; c < col_end; ++c) {
        *out++ = all[r * s.shape.cols + c];
      }
    }
    return absl::OkStatus();
  }
  absl::Status ReadBlocks(std::string_view name, int64_t row_begin, int64_t row_end,
                          int64_t col_begin, int64_t col_end, uint8_t* out) const override {
    Read();
    const Stored& s = At(name);
    const int64_t bv = s.type.block_values, bb = s.type.block_bytes;
    if (col_begin % bv != 0 || col_end % bv != 0) {
      return absl::InvalidArgumentError("columns off the block boundaries");
    }
    const int64_t row_bytes = s.shape.cols / bv * bb;
    const int64_t width = (col_end - col_begin) / bv * bb;
    for (int64_t r = row_begin; r < row_end; ++r, out += width) {
      std::memcpy(out, &s.bytes[r * row_bytes + col_begin / bv * bb], width);
    }
    return absl::OkStatus();
  }

  const Stored& At(std::string_view name) const { return tensors_.at(std::string(name)); }

  // ReadSlice and ReadBlocks calls so far; `on_read` runs at each.
  mutable int reads = 0;
  std::function<void()> on_read;

 private:
  void Read() const {
    ++reads;
    if (on_read) on_read();
  }

  model::ModelConfig config_;
  std::map<std::string, Stored> tensors_;
};

// The f32 values of rows x cols of `name` (the source's dequantisation).
std::vector<float> Values(const BlockSource& src, const std::string& name, model::Range rows,
                          model::Range cols) {
  std::vector<float> v(static_cast<size_t>(rows.size() * cols.size()));
  EXPECT_TRUE(src.ReadSlice(name, rows.begin, rows.end, cols.begin, cols.end, v.data()).ok());
  return v;
}

// The f32 values a packed tensor holds (in the kernels' layout, weight_layout.h).
std::vector<float> Held(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.elements()));
  kernels::cpu::DequantizeLayoutRows(FormatOf(t.dtype), static_cast<const uint8_t*>(t.data), t.cols,
                                     0, t.rows, v.data());
  return v;
}

class WeightLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backend_.HoldsPacked(DType::kQ4_1)) GTEST_SKIP() << "no AVX2/FMA/F16C here";
    src_.Add("q41", model::GgmlType::kQ4_1, 6, 96, 1);
    src_.Add("q41b", model::GgmlType::kQ4_1, 4, 96, 2);
    src_.Add("q80", model::GgmlType::kQ8_0, 4, 96, 3);
    src_.Add("f32", model::GgmlType::kF32, 4, 96, 4);
  }
  CpuBackend backend_{1};
  BlockSource src_;
};

TEST_F(WeightLoaderTest, AlignedPartsKeepTheirBytesAndPadRowsAreZero) {
  WeightLoader loader(&src_, &backend_, /*exact=*/false);
  // Rows 1..4 of q41 then all of q41b (fused, one type), padded to 10 rows.
  const auto t = loader.Matrix({{"q41", {1, 4}, {0, 96}}, {"q41b", {0, 4}, {0, 96}}}, 10, 96);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype, DType::kQ4_1);
  const int64_t row_bytes = 96 / 32 * 20;
  const auto* held = static_cast<const uint8_t*>(t->data);
  EXPECT_EQ(std::memcmp(held, &src_.At("q41").bytes[1 * row_bytes], 3 * row_bytes), 0);
  EXPECT_EQ(std::memcmp(held + 3 * row_bytes, src_.At("q41b").bytes.data(), 4 * row_bytes), 0);
  for (int64_t i = 7 * row_bytes; i < 10 * row_bytes; ++i) ASSERT_EQ(held[i], 0) << i;
  // A row-parallel slice on block boundaries keeps its blocks too.
  const auto cols = loader.Matrix({{"q41", {0, 6}, {32, 96}}}, 6, 64);
  ASSERT_TRUE(cols.ok()) << cols.status();
  EXPECT_EQ(cols->dtype, DType::kQ4_1);
  EXPECT_EQ(Held(*cols), Values(src_, "q41", {0, 6}, {32, 96}));
  EXPECT_EQ(loader.Summary(), "2 Q4_1");
}

TEST_F(WeightLoaderTest, SplitInsideABlockIsRequantisedToQ8_0) {
  WeightLoader loader(&src_, &backend_, /*exact=*/false);
  const auto t = loader.Matrix({{"q41", {0, 6}, {16, 80}}}, 6, 64);  // cuts blocks 0 and 2
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype, DType::kQ8_0);
  const std::vector<float> want = Values(src_, "q41", {0, 6}, {16, 80});
  const std::vector<float> got = Held(*t);
  for (size_t i = 0; i < want.size(); i += 32) {
    float amax = 0;
    for (size_t j = i; j < i + 32; ++j) amax = std::max(amax, std::fabs(want[j]));
    for (size_t j = i; j < i + 32; ++j) {
      ASSERT_NEAR(got[j], want[j], amax / 127 * 0.51f + 1e-3f * amax) << j;
    }
  }
}

TEST_F(WeightLoaderTest, FusedPartsOfDifferentTypesAreRequantisedToQ8_0) {
  WeightLoader loader(&src_, &backend_, /*exact=*/false);
  const auto t = loader.Matrix({{"q41", {0, 2}, {0, 96}}, {"q80", {0, 4}, {0, 96}}}, 6, 96);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype, DType::kQ8_0);
  const std::vector<float> got = Held(*t);
  // The Q8_0 part comes through exactly (re-quantising Q8_0 values keeps them, up to the f16
  // rounding of the recomputed scale); check it within a step.
  const std::vector<float> q80 = Values(src_, "q80", {0, 4}, {0, 96});
  for (size_t i = 0; i < q80.size(); ++i) ASSERT_NEAR(got[2 * 96 + i], q80[i], 1.1f / 127) << i;
}

TEST_F(WeightLoaderTest, ExactModeAndF32SourcesGiveDequantisedF32) {
  WeightLoader exact(&src_, &backend_, /*exact=*/true);
  const auto t = exact.Matrix({{"q41", {0, 6}, {0, 96}}}, 6, 96);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype, DType::kF32);
  std::vector<float> got(6 * 96);
  ASSERT_TRUE(backend_.Download(*t, got.data()).ok());
  EXPECT_EQ(got, Values(src_, "q41", {0, 6}, {0, 96}));

  WeightLoader packed(&src_, &backend_, /*exact=*/false);
  const auto f = packed.Matrix({{"f32", {0, 4}, {8, 40}}}, 4, 32);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->dtype, DType::kF32);
  std::vector<float> fv(4 * 32);
  ASSERT_TRUE(backend_.Download(*f, fv.data()).ok());
  EXPECT_EQ(fv, Values(src_, "f32", {0, 4}, {8, 40}));
}

TEST_F(WeightLoaderTest, ACancelledLoadReadsNothing) {
  WeightLoader loader(&src_, &backend_, /*exact=*/false, [] { return true; });
  const auto m = loader.Matrix({{"q41", {0, 6}, {0, 96}}}, 6, 96);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kCancelled) << m.status();
  EXPECT_EQ(m.status().message(), "weight load cancelled after 0 tensors, reading q41");
  EXPECT_EQ(loader.Vector("f32", 96).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(src_.reads, 0);
}

TEST_F(WeightLoaderTest, CancellingAfterSomeTensorsStopsAtTheNext) {
  bool cancel = false;
  WeightLoader loader(&src_, &backend_, /*exact=*/false, [&] { return cancel; });
  ASSERT_TRUE(loader.Matrix({{"q41", {0, 6}, {0, 96}}}, 6, 96).ok());
  ASSERT_TRUE(loader.Vector("f32", 96).ok());
  ASSERT_TRUE(loader.Matrix({{"q80", {0, 4}, {0, 96}}}, 4, 96).ok());
  const int reads = src_.reads;
  cancel = true;
  const auto m = loader.Matrix({{"q41b", {0, 4}, {0, 96}}}, 4, 96);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kCancelled) << m.status();
  EXPECT_EQ(m.status().message(), "weight load cancelled after 3 tensors, reading q41b");
  EXPECT_EQ(src_.reads, reads);
}

// A Q4_1 matrix of 3300 x 4096 (2560 bytes a row) is 8.4 MB: two chunks of at most 8 MiB.
TEST_F(WeightLoaderTest, ALargeTensorComesInChunksAndACancelStopsBetweenThem) {
  constexpr int64_t kRows = 3300, kCols = 4096;
  src_.Add("big", model::GgmlType::kQ4_1, kRows, kCols, 5);
  WeightLoader whole(&src_, &backend_, /*exact=*/false);
  const auto t = whole.Matrix({{"big", {0, kRows}, {0, kCols}}}, kRows, kCols);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(src_.reads, 2);
  ASSERT_EQ(t->dtype, DType::kQ4_1);
  const std::vector<uint8_t>& stored = src_.At("big").bytes;
  EXPECT_EQ(std::memcmp(t->data, stored.data(), stored.size()), 0);

  bool cancel = false;
  src_.on_read = [&] { cancel = true; };  // cancelled while its first chunk is read
  src_.reads = 0;
  WeightLoader cancelled(&src_, &backend_, /*exact=*/false, [&] { return cancel; });
  const auto c = cancelled.Matrix({{"big", {0, kRows}, {0, kCols}}}, kRows, kCols);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kCancelled) << c.status();
  EXPECT_EQ(c.status().message(), "weight load cancelled after 0 tensors, reading big");
  EXPECT_EQ(src_.reads, 1);
}

// The f32 path (exact mode) reads in chunks too: 2100 x 1024 f32 is 8.6 MB, two chunks.
TEST_F(WeightLoaderTest, ALargeTensorComesWholeInExactMode) {
  constexpr int64_t kRows = 2100, kCols = 1024;
  src_.Add("big32", model::GgmlType::kF32, kRows, kCols, 6);
  WeightLoader exact(&src_, &backend_, /*exact=*/true);
  const auto t = exact.Matrix({{"big32", {0, kRows}, {0, kCols}}}, kRows + 3, kCols);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(src_.reads, 2);
  std::vector<float> got(static_cast<size_t>((kRows + 3) * kCols));
  ASSERT_TRUE(backend_.Download(*t, got.data()).ok());
  std::vector<float> want = Values(src_, "big32", {0, kRows}, {0, kCols});
  want.resize(got.size(), 0.0f);  // the zero rows below
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tpserve::engine
