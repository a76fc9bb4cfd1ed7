// libFuzzer target: arbitrary bytes parsed as a .safetensors file; every tensor of a file
// that parses is read back (supported dtypes) within a work cap.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "server/model/weights/safetensors_file.h"

namespace {
constexpr uint64_t kMaxValuesPerInput = 1 << 20;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tpserve::model::SafetensorsFile::FromBytes(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) return 0;
  uint64_t budget = kMaxValuesPerInput;
  std::vector<float> out;
  for (const auto& t : (*file)->tensors()) {
    const uint64_t n = std::min<uint64_t>(t.n_values, budget);
    budget -= n;
    out.resize(n);
    (void)(*file)->ReadValues(t, 0, n, out.data());
    // A read past the end must be refused, never performed.
    if ((*file)->ReadValues(t, t.n_values, 1, out.data()).ok()) __builtin_trap();
    if (budget == 0) break;
  }
  return 0;
}
