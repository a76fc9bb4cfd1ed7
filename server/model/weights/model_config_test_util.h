// Test-only builders of model files in memory: a minimal GGUF v3 writer and a safetensors
// writer. Header-only; each builder is single-threaded.
#ifndef TPSERVE_SERVER_MODEL_WEIGHTS_MODEL_CONFIG_TEST_UTIL_H_
#define TPSERVE_SERVER_MODEL_WEIGHTS_MODEL_CONFIG_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace tpserve::model::testing {

// Builds GGUF v3 bytes: metadata key/values and F32 tensors.
class GgufBuilder {
 public:
  GgufBuilder& Str(const std::string& key, const std::string& v) {
    Key(key, 8);
    PutStr(&kv_, v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& U32(const std::string& key, uint32_t v) {
    Key(key, 4);
    Put(&kv_, v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& F32(const std::string& key, float v) {
    Key(key, 6);
    Put(&kv_, v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& StrArray(const std::string& key, const std::vector<std::string>& v) {
    Key(key, 9);
    Put(&kv_, uint32_t{8});
    Put(&kv_, uint64_t{v.size()});
    for (const std::string& s : v) PutStr(&kv_, s);
    ++n_kv_;
    return *this;
  }
  // An F32 tensor with ggml dims (dims[0] fastest) and row-major values.
  GgufBuilder& Tensor(const std::string& name, std::vector<uint64_t> dims,
                      const std::vector<float>& values) {
    tensors_.push_back({name, std::move(dims), values});
    return *this;
  }

  std::string Build() const {
    std::string out = "GGUF";
    Put(&out, uint32_t{3});
    Put(&out, uint64_t{tensors_.size()});
    Put(&out, n_kv_);
    out += kv_;
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
      PutStr(&out, t.name);
      Put(&out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) Put(&out, d);
      Put(&out, uint32_t{0});  // F32
      Put(&out, offset);
      offset += (t.values.size() * 4 + 31) / 32 * 32;
    }
    while (out.size() % 32 != 0) out.push_back('\0');
    for (const auto& t : tensors_) {
      out.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * 4);
      while (out.size() % 32 != 0) out.push_back('\0');
    }
    return out;
  }

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> dims;
    std::vector<float> values;
  };
  template <typename V>
  static void Put(std::string* s, V v) {
    s->append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  static void PutStr(std::string* s, const std::string& v) {
    Put(s, uint64_t{v.size()});
    *s += v;
  }
  void Key(const std::string& key, uint32_t type) {
    PutStr(&kv_, key);
    Put(&kv_, type);
  }

  std::string kv_;
  uint64_t n_kv_ = 0;
  std::vector<T> tensors_;
};

// Safetensors bytes from a header (written as given) and a data region.
inline std::string SafetensorsBytes(const std::string& header, const std::string& data) {
  std::string out;
  const uint64_t n = header.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

// A well-formed safetensors file of F32 tensors {name, shape, values}, in the given order.
struct StTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};
inline std::string MakeSafetensors(const std::vector<StTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const StTensor& t : tensors) {
    const uint64_t begin = data.size();
    data.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * 4);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  return SafetensorsBytes(h, data);
}

}  // namespace tpserve::model::testing

#endif  // TPSERVE_SERVER_MODEL_WEIGHTS_MODEL_CONFIG_TEST_UTIL_H_
