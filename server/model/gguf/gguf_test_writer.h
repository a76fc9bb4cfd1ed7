// Test-only GGUF image builder: metadata values of every type (arrays nest), tensors laid
// out at aligned offsets, and hooks to corrupt the result (wrong counts, offsets, versions).
// Not thread-safe; for tests and fuzz seeds only.
#ifndef TPSERVE_SERVER_MODEL_GGUF_GGUF_TEST_WRITER_H_
#define TPSERVE_SERVER_MODEL_GGUF_GGUF_TEST_WRITER_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tpserve::model::testing {

// Appends the little-endian bytes of a trivially copyable value.
template <typename T>
void AppendLe(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

// A GGUF string: uint64 length + bytes.
inline void AppendGgufString(std::string& out, const std::string& s) {
  AppendLe<uint64_t>(out, s.size());
  out += s;
}

// One encoded metadata value: its type code and the bytes that follow the type code.
struct TestValue {
  uint32_t type = 0;
  std::string payload;

  template <typename T>
  static TestValue Scalar(uint32_t type, T v) {
    TestValue r{type, {}};
    AppendLe<T>(r.payload, v);
    return r;
  }
  static TestValue U8(uint8_t v) { return Scalar(0, v); }
  static TestValue I8(int8_t v) { return Scalar(1, v); }
  static TestValue U16(uint16_t v) { return Scalar(2, v); }
  static TestValue I16(int16_t v) { return Scalar(3, v); }
  static TestValue U32(uint32_t v) { return Scalar(4, v); }
  static TestValue I32(int32_t v) { return Scalar(5, v); }
  static TestValue F32(float v) { return Scalar(6, v); }
  static TestValue Bool(bool v) { return Scalar<uint8_t>(7, v ? 1 : 0); }
  static TestValue Str(const std::string& s) {
    TestValue r{8, {}};
    AppendGgufString(r.payload, s);
    return r;
  }
  static TestValue U64(uint64_t v) { return Scalar(10, v); }
  static TestValue I64(int64_t v) { return Scalar(11, v); }
  static TestValue F64(double v) { return Scalar(12, v); }
  // An array of `elem_type`; every element must have that type (arrays may nest).
  static TestValue Array(uint32_t elem_type, const std::vector<TestValue>& elems) {
    TestValue r{9, {}};
    AppendLe<uint32_t>(r.payload, elem_type);
    AppendLe<uint64_t>(r.payload, elems.size());
    for (const TestValue& e : elems) r.payload += e.payload;
    return r;
  }
  // Any bytes after a given type code (for malformed values).
  static TestValue Raw(uint32_t type, std::string payload) { return {type, std::move(payload)}; }
};

struct TestTensor {
  std::string name;
  std::vector<uint64_t> dims;      // dims[0] fastest
  uint32_t type = 0;               // ggml type code
  std::string data;                // raw bytes, written at the tensor's offset (if any)
  std::optional<uint64_t> offset;  // overrides the computed (aligned) offset
};

class GgufTestWriter {
 public:
  explicit GgufTestWriter(uint32_t version = 3) : version_(version) {}

  GgufTestWriter& Add(const std::string& key, const TestValue& v) {
    kvs_.emplace_back(key, v);
    return *this;
  }
  // Lays tensors out at multiples of `alignment` and records general.alignment (as UINT32).
  GgufTestWriter& SetAlignment(uint32_t alignment) {
    alignment_ = alignment;
    return Add("general.alignment", TestValue::U32(alignment));
  }
  GgufTestWriter& AddTensor(TestTensor t) {
    tensors_.push_back(std::move(t));
    return *this;
  }

  // Corruption hooks.
  std::optional<uint32_t> magic;
  std::optional<uint64_t> tensor_count;
  std::optional<uint64_t> kv_count;
  bool pad_data_section = true;  // false: omit the padding before the data section

  // The file image. Tensor data go at offsets aligned to the alignment, in order.
  std::string Build() const {
    std::string out;
    AppendLe<uint32_t>(out, magic.value_or(0x46554747));
    AppendLe<uint32_t>(out, version_);
    AppendLe<uint64_t>(out, tensor_count.value_or(tensors_.size()));
    AppendLe<uint64_t>(out, kv_count.value_or(kvs_.size()));
    for (const auto& [key, v] : kvs_) {
      AppendGgufString(out, key);
      AppendLe<uint32_t>(out, v.type);
      out += v.payload;
    }
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const TestTensor& t : tensors_) {
      const uint64_t off = t.offset.value_or(next);
      offsets.push_back(off);
      next = AlignUp(std::max(next, off + t.data.size()));
      AppendGgufString(out, t.name);
      AppendLe<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) AppendLe<uint64_t>(out, d);
      AppendLe<uint32_t>(out, t.type);
      AppendLe<uint64_t>(out, off);
    }
    if (pad_data_section) out.resize(AlignUp(out.size()), '\0');
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].data.empty()) continue;  // nothing to place (e.g. a bogus offset)
      const size_t at = data_start + offsets[i];
      if (out.size() < at + tensors_[i].data.size()) out.resize(at + tensors_[i].data.size());
      out.replace(at, tensors_[i].data.size(), tensors_[i].data);
    }
    return out;
  }

 private:
  uint64_t AlignUp(uint64_t x) const { return (x + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t version_;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, TestValue>> kvs_;
  std::vector<TestTensor> tensors_;
};

}  // namespace tpserve::model::testing

#endif  // TPSERVE_SERVER_MODEL_GGUF_GGUF_TEST_WRITER_H_
