#include "server/model/ggml_type.h"

#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tpserve::model {
namespace {

// Block geometry as in ggml's type_traits (ggml.c): QK4_0 = QK4_1 = QK8_0 = 32, QK_K = 256.
constexpr std::array<GgmlTypeInfo, 9> kTypes = {{
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 2 + 16},
    {GgmlType::kQ4_1, "Q4_1", 32, 2 + 2 + 16},
    {GgmlType::kQ8_0, "Q8_0", 32, 2 + 32},
    {GgmlType::kQ4_K, "Q4_K", 256, 2 + 2 + 12 + 128},
    {GgmlType::kQ5_K, "Q5_K", 256, 2 + 2 + 12 + 32 + 128},
    {GgmlType::kQ6_K, "Q6_K", 256, 128 + 64 + 16 + 2},
    {GgmlType::kBF16, "BF16", 1, 2},
}};

// absl::string_view is not std::string_view in this Abseil build; bridges for StrCat.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::StatusOr<GgmlTypeInfo> LookupGgmlType(uint32_t raw) {
  for (const GgmlTypeInfo& info : kTypes) {
    if (static_cast<uint32_t>(info.type) == raw) return info;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported ggml type code ", raw,
                   " (supported: F32=0, F16=1, Q4_0=2, Q4_1=3, Q8_0=8, Q4_K=12, Q5_K=13, "
                   "Q6_K=14, BF16=30)"));
}

absl::StatusOr<uint64_t> BytesForValues(const GgmlTypeInfo& info, uint64_t n_values) {
  const uint64_t block_values = static_cast<uint64_t>(info.block_values);
  if (block_values == 0 || n_values % block_values != 0) {
    return absl::InvalidArgumentError(absl::StrCat(n_values, " values of ", Sv(info.name),
                                                   " are not a whole number of blocks of ",
                                                   info.block_values));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(n_values / block_values, static_cast<uint64_t>(info.block_bytes),
                             &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(n_values, " values of ", Sv(info.name), " overflow a 64-bit byte count"));
  }
  return bytes;
}

}  // namespace tpserve::model
