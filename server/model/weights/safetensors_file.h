// SafetensorsFile: one read-only, memory-mapped .safetensors file: its JSON header (tensor
// directory and optional `__metadata__`) and bounds-checked, f32-converting access to each
// tensor's values. Open validates the whole layout (header size, JSON, dtypes, shapes,
// offsets, contiguity, duplicates) and reports each problem as a Status naming it.
// Immutable after Open; thread-safe.
#ifndef TPSERVE_SERVER_MODEL_WEIGHTS_SAFETENSORS_FILE_H_
#define TPSERVE_SERVER_MODEL_WEIGHTS_SAFETENSORS_FILE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tpserve::model {

// Header lengths above this are refused as absurd (the reference implementation's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One tensor of the header. Offsets are relative to the start of the data region (the byte
// after the header); the values are row-major with shape `shape`.
struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;           // as written in the header: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;  // empty for a scalar
  uint64_t begin = 0;          // data_offsets[0]
  uint64_t end = 0;            // data_offsets[1]
  uint64_t n_values = 0;       // product of shape (1 for a scalar)
  int element_bytes = 0;       // 0 when the dtype is not one the format defines
};

class SafetensorsFile {
 public:
  // Maps `path` and parses it; errors name the path.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses a copy of `bytes` (for tests and fuzzing).
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string_view bytes);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Where the file came from ("<bytes>" for FromBytes), for error messages.
  const std::string& path() const { return path_; }
  // Tensors in data order (ascending offsets).
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  // The tensor called `name`, or nullptr.
  const SafetensorsTensorInfo* Find(std::string_view name) const;
  // The string values of `__metadata__` (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's raw bytes inside the mapping (valid as long as this object).
  absl::Span<const uint8_t> TensorData(const SafetensorsTensorInfo& info) const;

  // Converts values [first, first + n) of `info` (flat row-major index) to f32 in
  // out[0, n). F32, F16 and BF16 are supported; any other dtype is InvalidArgument naming
  // it; a range past the tensor is OutOfRange.
  absl::Status ReadValues(const SafetensorsTensorInfo& info, uint64_t first, uint64_t n,
                          float* out) const;

 private:
  SafetensorsFile() = default;
  absl::Status Parse();

  std::string path_;
  // The whole file: either an mmap'd region or owned_ bytes.
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void* mapping_ = nullptr;
  std::string owned_;

  uint64_t data_offset_ = 0;  // 8 + header length
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Bytes per element of a safetensors dtype name, or 0 when the name is not one the format
// defines.
int SafetensorsDtypeBytes(std::string_view dtype);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_WEIGHTS_SAFETENSORS_FILE_H_
