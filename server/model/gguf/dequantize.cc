// Bounds checks and dispatch to the per-format block kernels of kernels/cpu/quant/formats.h.
#include "server/model/gguf/dequantize.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/quant/formats.h"
#include "server/common/status_macros.h"

namespace tpserve::model {
namespace {

// absl::string_view is not std::string_view in this Abseil build; bridges for StrCat.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// The kernel for `type` and its canonical geometry (the caller's copy is not trusted).
struct Kernel {
  kernels::cpu::DequantizeFn fn;
  uint64_t block_values;
  uint64_t block_bytes;
};

absl::StatusOr<Kernel> KernelFor(const GgmlTypeInfo& type) {
  ASSIGN_OR_RETURN(const GgmlTypeInfo info, LookupGgmlType(static_cast<uint32_t>(type.type)));
  if (info.block_values != type.block_values || info.block_bytes != type.block_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("type ", Sv(info.name), " given with geometry ", type.block_values, "/",
                     type.block_bytes, ", expected ", info.block_values, "/", info.block_bytes));
  }
  return Kernel{kernels::cpu::FormatKernelsFor(info.format).dequantize,
                static_cast<uint64_t>(info.block_values), static_cast<uint64_t>(info.block_bytes)};
}

}  // namespace

absl::Status DequantizeValues(const GgmlTypeInfo& type, absl::Span<const uint8_t> tensor_bytes,
                              uint64_t first_value, uint64_t n_values, float* out) {
  ASSIGN_OR_RETURN(const Kernel k, KernelFor(type));
  if (first_value % k.block_values != 0 || n_values % k.block_values != 0) {
    return absl::InvalidArgumentError(absl::StrCat("first_value ", first_value, " and n_values ",
                                                   n_values, " must be multiples of the ",
                                                   Sv(type.name), " block size ", k.block_values));
  }
  uint64_t begin = 0, len = 0, end = 0;
  if (__builtin_mul_overflow(first_value / k.block_values, k.block_bytes, &begin) ||
      __builtin_mul_overflow(n_values / k.block_values, k.block_bytes, &len) ||
      __builtin_add_overflow(begin, len, &end) || end > tensor_bytes.size()) {
    return absl::OutOfRangeError(absl::StrCat(Sv(type.name), " values [", first_value, ", +",
                                              n_values, ") lie past the end of the ",
                                              tensor_bytes.size(), "-byte tensor data"));
  }
  if (n_values == 0) return absl::OkStatus();
  if (out == nullptr) return absl::InvalidArgumentError("DequantizeValues: null output");
  k.fn(tensor_bytes.data() + begin, static_cast<int64_t>(n_values / k.block_values), out);
  return absl::OkStatus();
}

absl::Status DequantizeSlice(const GgmlTypeInfo& type, absl::Span<const uint8_t> tensor_bytes,
                             int64_t row_len, int64_t row_begin, int64_t row_end, int64_t col_begin,
                             int64_t col_end, float* out) {
  ASSIGN_OR_RETURN(const Kernel k, KernelFor(type));
  const auto bv = static_cast<int64_t>(k.block_values);
  if (row_len <= 0 || row_len % bv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("row length ", row_len,
                                                   " is not a positive multiple of the ",
                                                   Sv(type.name), " block size ", bv));
  }
  if (row_begin < 0 || row_begin > row_end) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad row range [", row_begin, ", ", row_end, ")"));
  }
  if (col_begin < 0 || col_begin > col_end || col_end > row_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad column range [", col_begin, ", ", col_end, ") for row length ", row_len));
  }
  if (col_begin % bv != 0 || col_end % bv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("column range [", col_begin, ", ", col_end,
                                                   ") does not land on ", Sv(type.name),
                                                   " block boundaries (block size ", bv, ")"));
  }
  // Every quantity below is bounded by row_end * row_bytes, which is checked to fit in the
  // tensor's bytes.
  const uint64_t row_bytes = static_cast<uint64_t>(row_len / bv) * k.block_bytes;
  uint64_t need = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(row_end), row_bytes, &need) ||
      need > tensor_bytes.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("rows [", row_begin, ", ", row_end, ") of ", row_len, " ", Sv(type.name),
                     " values lie past the end of the ", tensor_bytes.size(), "-byte tensor data"));
  }
  const int64_t out_cols = col_end - col_begin;
  if (out_cols == 0 || row_end == row_begin) return absl::OkStatus();
  if (out == nullptr) return absl::InvalidArgumentError("DequantizeSlice: null output");
  const uint64_t col_offset = static_cast<uint64_t>(col_begin / bv) * k.block_bytes;
  const int64_t n_blocks = out_cols / bv;
  for (int64_t r = row_begin; r < row_end; ++r) {
    // out row (r - row_begin): [out_cols]
    k.fn(tensor_bytes.data() + static_cast<uint64_t>(r) * row_bytes + col_offset, n_blocks,
         out + (r - row_begin) * out_cols);
  }
  return absl::OkStatus();
}

int64_t TensorRowCount(const GgufTensorInfo& info) {
  if (info.dims.empty() || info.dims[0] == 0) return 0;
  return static_cast<int64_t>(info.n_values / info.dims[0]);
}

absl::StatusOr<std::vector<float>> DequantizeTensorRows(const GgufFile& file,
                                                        const GgufTensorInfo& info,
                                                        int64_t row_begin, int64_t row_end) {
  if (file.FindTensor(info.name) != &info) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor info '", info.name, "' does not belong to this file"));
  }
  const int64_t n_rows = TensorRowCount(info);
  if (n_rows == 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", info.name, "' has no rows"));
  }
  if (row_begin < 0 || row_begin > row_end || row_end > n_rows) {
    return absl::OutOfRangeError(absl::StrCat("rows [", row_begin, ", ", row_end,
                                              ") out of range for tensor '", info.name, "' with ",
                                              n_rows, " rows"));
  }
  const auto row_len = static_cast<int64_t>(info.dims[0]);
  // result: [row_end - row_begin, row_len]; at most n_values, which the file's bytes back.
  std::vector<float> out(static_cast<size_t>((row_end - row_begin) * row_len));
  RETURN_IF_ERROR(DequantizeSlice(info.type, file.TensorData(info), row_len, row_begin, row_end, 0,
                                  row_len, out.data()));
  return out;
}

}  // namespace tpserve::model
