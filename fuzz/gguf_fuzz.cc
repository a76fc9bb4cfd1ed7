// libFuzzer target for the GGUF reader and dequantisation: parses the input with
// GgufFile::FromBytes, then dequantises the first rows of every tensor through
// DequantizeTensorRows, with a cap on the values produced per input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/model/gguf/dequantize.h"
#include "server/model/gguf/gguf_file.h"

namespace {

constexpr int64_t kMaxValuesPerInput = int64_t{1} << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tpserve::model::GgufFile;
  auto file = GgufFile::FromBytes(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) return 0;
  const GgufFile& g = **file;
  // Touch the metadata through the typed getters the loaders use.
  for (const auto& [key, value] : g.metadata()) {
    (void)g.GetString(key);
    (void)g.GetUint(key);
    (void)g.GetFloat(key);
    (void)g.GetIntArray(key);
    (void)g.GetStringArray(key);
  }
  int64_t budget = kMaxValuesPerInput;
  for (const auto& t : g.tensors()) {
    const auto row_len = static_cast<int64_t>(t.dims[0]);
    if (row_len > budget) continue;
    const int64_t rows = std::min<int64_t>(tpserve::model::TensorRowCount(t), budget / row_len);
    auto values = tpserve::model::DequantizeTensorRows(g, t, 0, std::min<int64_t>(rows, 4));
    if (!values.ok()) __builtin_trap();  // the file parsed: every tensor must be readable
    budget -= static_cast<int64_t>(values->size());
  }
  return 0;
}
