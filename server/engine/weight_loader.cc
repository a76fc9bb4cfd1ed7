#include "server/engine/weight_loader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "kernels/cpu/quant/formats.h"
#include "server/common/status_macros.h"

namespace tpserve::engine {

absl::StatusOr<Tensor> WeightLoader::Matrix(absl::Span<const WeightPart> parts, int64_t total_rows,
                                            int64_t cols) {
  RETURN_IF_ERROR(CheckCancelled(parts.front().name));
  // The parts' stored type, whether they share it and whether their columns fall on its blocks.
  bool mixed = false, aligned = true;
  DType stored = DType::kF32;
  for (size_t p = 0; p < parts.size(); ++p) {
    ASSIGN_OR_RETURN(const model::GgmlTypeInfo type, weights_->StoredType(parts[p].name));
    const DType dtype = DTypeOf(type.format);
    if (p == 0) stored = dtype;
    mixed |= dtype != stored;
    aligned &=
        parts[p].cols.begin % type.block_values == 0 && parts[p].cols.end % type.block_values == 0;
  }
  const bool packable = !exact_ && (mixed || stored != DType::kF32);
  if (packable && !mixed && aligned && backend_->HoldsPacked(stored)) {
    ASSIGN_OR_RETURN(Tensor t, backend_->Allocate(total_rows, cols, stored));
    const int64_t row_bytes = DTypeRowBytes(stored, cols);
    host_.assign(static_cast<size_t>(t.bytes()), 0);
    int64_t row = 0;
    for (const WeightPart& part : parts) {
      uint8_t* const out = host_.data() + row * row_bytes;  // [part.rows.size(), row_bytes]
      RETURN_IF_ERROR(ReadInChunks(part, row_bytes, [&](int64_t begin, int64_t end) {
        return weights_->ReadBlocks(part.name, begin, end, part.cols.begin, part.cols.end,
                                    out + (begin - part.rows.begin) * row_bytes);
      }));
      row += part.rows.size();
    }
    RETURN_IF_ERROR(backend_->Upload(host_.data(), stored, t));
    Count(stored);
    return t;
  }
  if (packable && cols % 32 == 0 && backend_->HoldsPacked(DType::kQ8_0)) {
    return RequantizedQ8_0(
        parts, total_rows, cols,
        mixed ? "its parts are stored in different types"
              : absl::StrCat("columns [", parts.front().cols.begin, ", ", parts.front().cols.end,
                             ") split ", DTypeName(stored), " blocks"));
  }
  RETURN_IF_ERROR(ReadFloats(parts, total_rows, cols));
  ASSIGN_OR_RETURN(Tensor t, backend_->Allocate(total_rows, cols, backend_->weight_dtype()));
  RETURN_IF_ERROR(backend_->Upload(floats_.data(), DType::kF32, t));
  Count(backend_->weight_dtype());
  return t;
}

absl::StatusOr<Tensor> WeightLoader::ExactSumsMatrix(const WeightPart& part, int64_t rows,
                                                     int64_t cols) {
  RETURN_IF_ERROR(CheckCancelled(part.name));
  ASSIGN_OR_RETURN(const model::GgmlTypeInfo type, weights_->StoredType(part.name));
  const DType stored = DTypeOf(type.format);
  const bool aligned =
      part.cols.begin % type.block_values == 0 && part.cols.end % type.block_values == 0;
  if (backend_->SumsExactly(stored) && aligned) return Matrix({part}, rows, cols);
  if (cols % 32 != 0 || !backend_->SumsExactly(DType::kQ8_0)) {
    return absl::FailedPreconditionError(
        absl::StrCat("weights: ", part.name, " columns [", part.cols.begin, ", ", part.cols.end,
                     "): no exact row-parallel sums on this backend for a slice of ", cols,
                     " columns (they need Q8_0 blocks of 32)"));
  }
  return RequantizedQ8_0(
      {part}, rows, cols,
      absl::StrCat(DTypeName(stored), " has no exact row-parallel sums (the canonical path)"));
}

absl::StatusOr<Tensor> WeightLoader::RequantizedQ8_0(absl::Span<const WeightPart> parts,
                                                     int64_t total_rows, int64_t cols,
                                                     const std::string& why) {
  LOG(INFO) << "weights: " << parts.front().name << (parts.size() > 1 ? " (fused)" : "")
            << " re-quantised to Q8_0: " << why;
  RETURN_IF_ERROR(ReadFloats(parts, total_rows, cols));
  ASSIGN_OR_RETURN(Tensor t, backend_->Allocate(total_rows, cols, DType::kQ8_0));
  host_.assign(static_cast<size_t>(t.bytes()), 0);
  kernels::cpu::QuantizeQ8_0(floats_.data(), total_rows * cols / 32, host_.data());
  RETURN_IF_ERROR(backend_->Upload(host_.data(), DType::kQ8_0, t));
  Count(DType::kQ8_0);
  return t;
}

absl::Status WeightLoader::ReadFloats(absl::Span<const WeightPart> parts, int64_t total_rows,
                                      int64_t cols) {
  floats_.assign(static_cast<size_t>(total_rows * cols), 0.0f);
  const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(float));
  int64_t row = 0;
  for (const WeightPart& part : parts) {
    float* const out = floats_.data() + row * cols;  // [part.rows.size(), cols]
    RETURN_IF_ERROR(ReadInChunks(part, row_bytes, [&](int64_t begin, int64_t end) {
      return weights_->ReadSlice(part.name, begin, end, part.cols.begin, part.cols.end,
                                 out + (begin - part.rows.begin) * cols);
    }));
    row += part.rows.size();
  }
  return absl::OkStatus();
}

absl::Status WeightLoader::ReadInChunks(const WeightPart& part, int64_t row_bytes,
                                        const std::function<absl::Status(int64_t, int64_t)>& read) {
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, row_bytes));
  for (int64_t begin = part.rows.begin; begin < part.rows.end; begin += chunk_rows) {
    RETURN_IF_ERROR(CheckCancelled(part.name));
    RETURN_IF_ERROR(read(begin, std::min(part.rows.end, begin + chunk_rows)));
  }
  return absl::OkStatus();
}

absl::Status WeightLoader::CheckCancelled(const std::string& reading) const {
  if (cancelled_ == nullptr || !cancelled_()) return absl::OkStatus();
  return absl::CancelledError(
      absl::StrCat("weight load cancelled after ", tensors_, " tensors, reading ", reading));
}

absl::StatusOr<Tensor> WeightLoader::Vector(const std::string& name, int64_t n) {
  RETURN_IF_ERROR(CheckCancelled(name));
  floats_.assign(static_cast<size_t>(n), 0.0f);
  RETURN_IF_ERROR(weights_->ReadRows(name, 0, 1, floats_.data()));
  ASSIGN_OR_RETURN(Tensor t, backend_->Allocate(1, n, DType::kF32));
  RETURN_IF_ERROR(backend_->Upload(floats_.data(), DType::kF32, t));
  ++tensors_;
  return t;
}

void WeightLoader::Count(DType dtype) {
  ++tensors_;
  for (auto& [d, n] : counts_) {
    if (d == dtype) {
      ++n;
      return;
    }
  }
  counts_.emplace_back(dtype, 1);
}

std::string WeightLoader::Summary() const {
  return absl::StrJoin(counts_, ", ", [](std::string* out, const std::pair<DType, int>& c) {
    absl::StrAppend(out, c.second, " ", DTypeName(c.first));
  });
}

}  // namespace tpserve::engine
