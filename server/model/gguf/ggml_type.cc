#include "server/model/gguf/ggml_type.h"

#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/quant/formats.h"

namespace tpserve::model {
namespace {

// The GGUF type codes and the kernel formats they are; the geometry is the kernels'.
struct TypeFormat {
  GgmlType type;
  kernels::cpu::WeightFormat format;
};
constexpr std::array<TypeFormat, 11> kTypes = {{
    {GgmlType::kF32, kernels::cpu::WeightFormat::kF32},
    {GgmlType::kF16, kernels::cpu::WeightFormat::kF16},
    {GgmlType::kQ4_0, kernels::cpu::WeightFormat::kQ4_0},
    {GgmlType::kQ4_1, kernels::cpu::WeightFormat::kQ4_1},
    {GgmlType::kQ5_0, kernels::cpu::WeightFormat::kQ5_0},
    {GgmlType::kQ5_1, kernels::cpu::WeightFormat::kQ5_1},
    {GgmlType::kQ8_0, kernels::cpu::WeightFormat::kQ8_0},
    {GgmlType::kQ4_K, kernels::cpu::WeightFormat::kQ4_K},
    {GgmlType::kQ5_K, kernels::cpu::WeightFormat::kQ5_K},
    {GgmlType::kQ6_K, kernels::cpu::WeightFormat::kQ6_K},
    {GgmlType::kBF16, kernels::cpu::WeightFormat::kBF16},
}};

// absl::string_view is not std::string_view in this Abseil build; bridges for StrCat.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::StatusOr<GgmlTypeInfo> LookupGgmlType(uint32_t raw) {
  for (const TypeFormat& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == raw) {
      const kernels::cpu::FormatKernels& k = kernels::cpu::FormatKernelsFor(t.format);
      return GgmlTypeInfo{t.type, k.name, k.block_values, k.block_bytes, t.format};
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported ggml type code ", raw,
                   " (supported: F32=0, F16=1, Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8, Q4_K=12, "
                   "Q5_K=13, Q6_K=14, BF16=30)"));
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
