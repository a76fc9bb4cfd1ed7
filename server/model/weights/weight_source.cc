// WeightSource's shared pieces and OpenWeightSource, which picks the format by path.
#include "server/model/weights/weight_source.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"

namespace tpserve::model {

absl::Status WeightSource::ReadRows(std::string_view name, int64_t row_begin, int64_t row_end,
                                    float* out) const {
  ASSIGN_OR_RETURN(const WeightShape shape, Shape(name));
  return ReadSlice(name, row_begin, row_end, 0, shape.cols, out);
}

absl::StatusOr<GgmlTypeInfo> WeightSource::StoredType(std::string_view name) const {
  RETURN_IF_ERROR(Shape(name).status());
  return LookupGgmlType(static_cast<uint32_t>(GgmlType::kF32));
}

absl::Status WeightSource::ReadBlocks(std::string_view name, int64_t row_begin, int64_t row_end,
                                      int64_t col_begin, int64_t col_end, uint8_t* out) const {
  return ReadSlice(name, row_begin, row_end, col_begin, col_end, reinterpret_cast<float*>(out));
}

absl::Status WeightSource::CheckRange(std::string_view name, const WeightShape& shape,
                                      int64_t row_begin, int64_t row_end, int64_t col_begin,
                                      int64_t col_end) {
  if (row_begin < 0 || row_begin > row_end || row_end > shape.rows || col_begin < 0 ||
      col_begin > col_end || col_end > shape.cols) {
    return absl::OutOfRangeError(absl::StrCat(
        "weight ", std::string(name), ": slice rows [", row_begin, ", ", row_end, ") cols [",
        col_begin, ", ", col_end, ") outside [", shape.rows, ", ", shape.cols, "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WeightSource>> OpenWeightSource(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (!fs::exists(fs::path(path) / "config.json", ec)) {
      return absl::NotFoundError(absl::StrCat(path, " is a directory without config.json"));
    }
    return OpenSafetensorsWeightSource(path);
  }
  if (absl::EndsWithIgnoreCase(path, ".gguf")) return OpenGgufWeightSource(path);
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  return absl::InvalidArgumentError(
      absl::StrCat(path, " is neither a .gguf file nor a Hugging Face directory with config.json"));
}

}  // namespace tpserve::model
