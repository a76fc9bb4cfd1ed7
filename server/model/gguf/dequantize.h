// Dequantisation of GGUF weight data (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
// Q6_K) to f32, whole or by row/column slice for tensor parallelism, with bounds checks; the
// per-format block kernels are kernels/cpu/quant's. Pure functions over caller-owned buffers;
// thread-safe.
#ifndef TPSERVE_SERVER_MODEL_GGUF_DEQUANTIZE_H_
#define TPSERVE_SERVER_MODEL_GGUF_DEQUANTIZE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/cpu/quant/half.h"
#include "server/model/gguf/ggml_type.h"
#include "server/model/gguf/gguf_file.h"

namespace tpserve::model {

// The exact half and bfloat16 conversions of the CPU kernels.
using ::tpserve::kernels::cpu::Bf16ToF32;
using ::tpserve::kernels::cpu::F16ToF32;

// Dequantises values [first_value, first_value + n_values) of a tensor of `type` whose
// bytes are `tensor_bytes` into out[0 .. n_values). first_value and n_values must be
// multiples of type.block_values (InvalidArgument otherwise) and the blocks must lie inside
// tensor_bytes (OutOfRange otherwise).
absl::Status DequantizeValues(const GgmlTypeInfo& type, absl::Span<const uint8_t> tensor_bytes,
                              uint64_t first_value, uint64_t n_values, float* out);

// Dequantises rows [row_begin, row_end) x columns [col_begin, col_end) of a row-major 2-D
// tensor [rows, row_len] (row_len == dims[0]; a row occupies row_len / block_values blocks):
//   out: [row_end - row_begin, col_end - col_begin], row-major.
// Column bounds must be multiples of the block size (InvalidArgument naming it); the rows
// must lie inside tensor_bytes (OutOfRange). This is how a tensor-parallel rank reads only
// its slice: whole rows for a column-parallel split, a column range for a row-parallel one.
absl::Status DequantizeSlice(const GgmlTypeInfo& type, absl::Span<const uint8_t> tensor_bytes,
                             int64_t row_len, int64_t row_begin, int64_t row_end, int64_t col_begin,
                             int64_t col_end, float* out);

// Rows of the 2-D view of `info` (dims[0] values per row; all higher dims flattened into
// rows; a 1-D tensor is one row) of a tensor of `file`:
//   result: [row_end - row_begin, dims[0]].
absl::StatusOr<std::vector<float>> DequantizeTensorRows(const GgufFile& file,
                                                        const GgufTensorInfo& info,
                                                        int64_t row_begin, int64_t row_end);

// Number of rows of the 2-D view of `info` (n_values / dims[0]).
int64_t TensorRowCount(const GgufTensorInfo& info);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_GGUF_DEQUANTIZE_H_
