// Weight element types of GGUF files (the ggml numbering) and their block geometry.
// Plain data and pure functions; thread-safe.
#ifndef TPSERVE_SERVER_MODEL_GGUF_GGML_TYPE_H_
#define TPSERVE_SERVER_MODEL_GGUF_GGML_TYPE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/cpu/quant/formats.h"

namespace tpserve::model {

// Values as stored in GGUF tensor infos (ggml's enum ggml_type).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// Geometry of one type: `block_values` values are stored in `block_bytes` bytes.
struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;  // "F32", "Q4_K", ...
  int64_t block_values;   // 1 for F32/F16/BF16, 32 for Q*_0/Q*_1, 256 for K-quants
  int64_t block_bytes;
  kernels::cpu::WeightFormat format;  // the CPU kernels' name for the same layout
};

// The geometry of `raw` (a GGUF type code), or InvalidArgument naming the unsupported code.
absl::StatusOr<GgmlTypeInfo> LookupGgmlType(uint32_t raw);

// Bytes needed for `n_values` values of `info`, or InvalidArgument when n_values is not a
// whole number of blocks or the byte count overflows.
absl::StatusOr<uint64_t> BytesForValues(const GgmlTypeInfo& info, uint64_t n_values);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_GGUF_GGML_TYPE_H_
