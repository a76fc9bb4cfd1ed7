// GgufWeightSource: a GGUF file's tensors as [rows, cols] views, dequantised to f32 on read or
// copied in their blocks; either way a non-finite value (a NaN or infinite scale) is refused
// with the tensor's name.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/gguf/dequantize.h"
#include "server/model/gguf/gguf_file.h"
#include "server/model/weights/weight_source.h"

namespace tpserve::model {
namespace {

class GgufWeightSource : public WeightSource {
 public:
  static absl::StatusOr<std::unique_ptr<WeightSource>> Open(const std::string& path) {
    auto src = std::unique_ptr<GgufWeightSource>(new GgufWeightSource());
    ASSIGN_OR_RETURN(src->file_, GgufFile::Open(path));
    ASSIGN_OR_RETURN(src->config_, ModelConfigFromGguf(*src->file_));
    for (const GgufTensorInfo& t : src->file_->tensors()) {
      if (t.dims.empty() || t.dims.size() > 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": tensor ", t.name, " has ", t.dims.size(), " dimensions; expected 1 or 2"));
      }
    }
    for (const char* required : {"token_embd.weight", "output_norm.weight"}) {
      if (src->file_->FindTensor(required) == nullptr) {
        return absl::NotFoundError(absl::StrCat(path, " has no tensor ", required));
      }
    }
    return std::unique_ptr<WeightSource>(std::move(src));
  }

  std::string_view format() const override { return "gguf"; }
  const ModelConfig& config() const override { return config_; }

  std::vector<std::string> Names() const override {
    std::vector<std::string> names;
    for (const GgufTensorInfo& t : file_->tensors()) names.push_back(t.name);
    std::sort(names.begin(), names.end());
    return names;
  }

  bool Has(std::string_view name) const override { return file_->FindTensor(name) != nullptr; }

  absl::StatusOr<WeightShape> Shape(std::string_view name) const override {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Lookup(name));
    return ShapeOf(*t);
  }

  absl::Status ReadSlice(std::string_view name, int64_t row_begin, int64_t row_end,
                         int64_t col_begin, int64_t col_end, float* out) const override {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Lookup(name));
    const WeightShape shape = ShapeOf(*t);
    RETURN_IF_ERROR(CheckRange(name, shape, row_begin, row_end, col_begin, col_end));
    if (row_begin == row_end || col_begin == col_end) return absl::OkStatus();
    const absl::Span<const uint8_t> bytes = file_->TensorData(*t);
    // Quantised blocks are never split: decode the block-aligned column range that covers
    // [col_begin, col_end) and copy the wanted columns out.
    const int64_t block = t->type.block_values;
    const int64_t cb = col_begin / block * block;
    const int64_t ce = std::min(shape.cols, (col_end + block - 1) / block * block);
    if (cb == col_begin && ce == col_end) {
      RETURN_IF_ERROR(
          DequantizeSlice(t->type, bytes, shape.cols, row_begin, row_end, col_begin, col_end, out));
      return CheckFinite(*t, row_begin, col_begin, out, row_end - row_begin, col_end - col_begin);
    }
    const int64_t rows = row_end - row_begin;
    const int64_t wide = ce - cb;
    const int64_t width = col_end - col_begin;
    std::vector<float> tmp(static_cast<size_t>(rows * wide));  // [rows, wide]
    RETURN_IF_ERROR(
        DequantizeSlice(t->type, bytes, shape.cols, row_begin, row_end, cb, ce, tmp.data()));
    RETURN_IF_ERROR(CheckFinite(*t, row_begin, cb, tmp.data(), rows, wide));
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(tmp.data() + r * wide + (col_begin - cb), width, out + r * width);
    }
    return absl::OkStatus();
  }

  void ReleaseResidentPages() const override { file_->ReleaseResidentPages(); }

  absl::StatusOr<GgmlTypeInfo> StoredType(std::string_view name) const override {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Lookup(name));
    return t->type;
  }

  absl::Status ReadBlocks(std::string_view name, int64_t row_begin, int64_t row_end,
                          int64_t col_begin, int64_t col_end, uint8_t* out) const override {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Lookup(name));
    const WeightShape shape = ShapeOf(*t);
    RETURN_IF_ERROR(CheckRange(name, shape, row_begin, row_end, col_begin, col_end));
    const int64_t block = t->type.block_values;
    if (col_begin % block != 0 || col_end % block != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight ", std::string(name), ": columns [", col_begin, ", ", col_end,
          ") do not fall on ", std::string(t->type.name), " block boundaries (", block, ")"));
    }
    if (row_begin == row_end || col_begin == col_end) return absl::OkStatus();
    const absl::Span<const uint8_t> bytes = file_->TensorData(*t);
    const int64_t row_bytes = shape.cols / block * t->type.block_bytes;
    const int64_t first = col_begin / block * t->type.block_bytes;
    const int64_t width = (col_end - col_begin) / block * t->type.block_bytes;
    if (static_cast<int64_t>(bytes.size()) < shape.rows * row_bytes) {
      return absl::OutOfRangeError(absl::StrCat("weight ", std::string(name), ": ", bytes.size(),
                                                " bytes of data, ", shape.rows * row_bytes,
                                                " needed"));
    }
    std::vector<float> decoded(static_cast<size_t>(col_end - col_begin));
    for (int64_t r = row_begin; r < row_end; ++r) {
      uint8_t* dst = out + (r - row_begin) * width;
      std::memcpy(dst, bytes.data() + r * row_bytes + first, static_cast<size_t>(width));
      RETURN_IF_ERROR(DequantizeValues(t->type, absl::MakeConstSpan(dst, width), 0,
                                       col_end - col_begin, decoded.data()));
      RETURN_IF_ERROR(CheckFinite(*t, r, col_begin, decoded.data(), 1, col_end - col_begin));
    }
    return absl::OkStatus();
  }

 private:
  GgufWeightSource() = default;

  // dims {cols} -> [1, cols]; dims {cols, rows} -> [rows, cols].
  static WeightShape ShapeOf(const GgufTensorInfo& t) {
    const int64_t cols = static_cast<int64_t>(t.dims[0]);
    return {t.dims.size() == 1 ? 1 : static_cast<int64_t>(t.dims[1]), cols};
  }

  // InvalidArgument naming the tensor when values [rows, cols] (the tensor's from row
  // `first_row`, column `first_col`) hold a NaN or an infinity: a corrupt scale, refused at
  // load rather than spread through the model.
  static absl::Status CheckFinite(const GgufTensorInfo& t, int64_t first_row, int64_t first_col,
                                  const float* values, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      if (!std::isfinite(values[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight ", t.name, " (", std::string(t.type.name), "): row ",
                         first_row + i / cols, " holds a non-finite value at column ",
                         first_col + i % cols, " (a NaN or infinite scale?)"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<const GgufTensorInfo*> Lookup(std::string_view name) const {
    const GgufTensorInfo* t = file_->FindTensor(name);
    if (t == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("weight ", std::string(name), " is not in the GGUF file"));
    }
    return t;
  }

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WeightSource>> OpenGgufWeightSource(const std::string& path) {
  return GgufWeightSource::Open(path);
}

}  // namespace tpserve::model
