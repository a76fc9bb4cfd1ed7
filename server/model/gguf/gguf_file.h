// GgufFile: a read-only, memory-mapped GGUF (v2 or v3) model file: its metadata key/values
// and tensor directory, with bounds-checked access to each tensor's bytes. Every structural
// problem is reported by Open as a Status naming it. Immutable after Open; thread-safe.
#ifndef TPSERVE_SERVER_MODEL_GGUF_GGUF_FILE_H_
#define TPSERVE_SERVER_MODEL_GGUF_GGUF_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/model/gguf/ggml_type.h"

namespace tpserve::model {

// GGUF metadata value type codes.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// Name of a metadata value type ("UINT32", "ARRAY", ...), or "UNKNOWN".
std::string_view GgufValueTypeName(GgufValueType type);

// Arrays may nest at most this deep (an array of arrays of scalars has depth 2).
inline constexpr int kGgufMaxArrayDepth = 8;

// One metadata value. Arrays hold their element type and elements (arrays may nest).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  // Integers of every width are widened to int64_t/uint64_t, floats to double.
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GgufValue>> value;
  GgufValueType array_type = GgufValueType::kUint8;  // element type when type == kArray
};

// One tensor of the directory. dims[0] is the fastest-varying (ggml's ne[0]): a 2-D weight
// [rows, cols] in row-major terms has dims = {cols, rows}.
struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;
  GgmlTypeInfo type;
  uint64_t offset = 0;      // from the start of the data section
  uint64_t n_values = 0;    // product of dims
  uint64_t size_bytes = 0;  // n_values / block_values * block_bytes
};

class GgufFile {
 public:
  // Maps `path` and parses it.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses a copy of `bytes` (for tests and fuzzing).
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string_view bytes);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Absolute file offset of the data section (a multiple of alignment()).
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  // The value of `key`, or nullptr.
  const GgufValue* Find(std::string_view key) const;

  // Typed getters: NotFound when absent, InvalidArgument (naming the key) on a type mismatch.
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;  // any non-negative integer
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;    // any integer
  absl::StatusOr<double> GetFloat(std::string_view key) const;   // float or integer
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // The tensor called `name`, or nullptr.
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The tensor's bytes inside the mapping (valid as long as this object).
  absl::Span<const uint8_t> TensorData(const GgufTensorInfo& info) const;
  // Drops the mapped file's pages from this process's resident memory (they stay in the page
  // cache; a later read faults them back in): once a model's weights are copied out, the
  // mapping should not count twice. No-op for FromBytes copies.
  void ReleaseResidentPages() const;

 private:
  GgufFile() = default;
  absl::Status Parse();

  // The whole file: either an mmap'd region or owned_ bytes.
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void* mapping_ = nullptr;
  std::string owned_;

  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  absl::flat_hash_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_GGUF_GGUF_FILE_H_
