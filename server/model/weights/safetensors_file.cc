#include "server/model/weights/safetensors_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"

namespace tpserve::model {
namespace {

using json = nlohmann::json;

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Parses `text` as JSON, refusing duplicate keys in any object (nlohmann would silently
// keep the last one). Never throws.
absl::StatusOr<json> ParseHeaderJson(std::string_view text) {
  std::vector<std::set<std::string>> keys;  // one key set per open object
  std::string duplicate;
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && parsed.is_string()) {
          const auto& k = parsed.get_ref<const std::string&>();
          if (!keys.back().insert(k).second && duplicate.empty()) duplicate = k;
        }
        break;
      default:
        break;
    }
    return true;
  };
  json j = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("header is not valid JSON");
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("header has duplicate key \"", duplicate, "\""));
  }
  return j;
}

absl::StatusOr<uint64_t> ReadUint(const json& v, std::string_view what, std::string_view name) {
  if (!v.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", std::string(name),
                                                   "\": ", std::string(what),
                                                   " must be a non-negative integer"));
  }
  if (!v.is_number_unsigned()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", std::string(name), "\": negative ", std::string(what), " ", s));
    }
    return static_cast<uint64_t>(s);
  }
  return v.get<uint64_t>();
}

absl::StatusOr<SafetensorsTensorInfo> ParseTensor(const std::string& name, const json& v,
                                                  uint64_t data_size) {
  SafetensorsTensorInfo t;
  t.name = name;
  if (!v.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", name, "\": entry is not an object"));
  }
  const auto dtype = v.find("dtype");
  const auto shape = v.find("shape");
  const auto offsets = v.find("data_offsets");
  if (dtype == v.end() || !dtype->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": missing string dtype"));
  }
  if (shape == v.end() || !shape->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": missing shape array"));
  }
  if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", name, "\": data_offsets must be an array of two integers"));
  }
  t.dtype = dtype->get<std::string>();
  t.element_bytes = SafetensorsDtypeBytes(t.dtype);
  t.n_values = 1;
  for (const json& d : *shape) {
    ASSIGN_OR_RETURN(const uint64_t dim, ReadUint(d, "shape dimension", name));
    if (dim > static_cast<uint64_t>(INT64_MAX) ||
        __builtin_mul_overflow(t.n_values, dim, &t.n_values)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", name, "\": shape element count overflows"));
    }
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  ASSIGN_OR_RETURN(t.begin, ReadUint((*offsets)[0], "data offset", name));
  ASSIGN_OR_RETURN(t.end, ReadUint((*offsets)[1], "data offset", name));
  if (t.begin > t.end || t.end > data_size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": data_offsets [", t.begin,
                                                   ", ", t.end, ") out of range of the ", data_size,
                                                   "-byte data region"));
  }
  if (t.element_bytes > 0) {
    uint64_t bytes;
    if (__builtin_mul_overflow(t.n_values, static_cast<uint64_t>(t.element_bytes), &bytes) ||
        bytes != t.end - t.begin) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor \"", name, "\": data_offsets span ", t.end - t.begin, " bytes but shape x ",
          t.dtype, " needs ", t.n_values, " x ", t.element_bytes));
    }
  }
  return t;
}

}  // namespace

int SafetensorsDtypeBytes(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2" || dtype == "F8_E8M0") {
    return 1;
  }
  return 0;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", std::strerror(err)));
  }
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* m = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("cannot mmap ", path, ": ", std::strerror(err)));
    }
    file->mapping_ = m;
    file->data_ = static_cast<const uint8_t*>(m);
  }
  close(fd);
  const absl::Status s = file->Parse();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(
    std::string_view bytes) {
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = "<bytes>";
  file->owned_.assign(bytes.data(), bytes.size());
  file->data_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::Status SafetensorsFile::Parse() {
  if (size_ < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("file too short (", size_, " bytes) for the 8-byte header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | data_[i];
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header length ", header_len, " is absurd (limit ", kSafetensorsMaxHeaderBytes, ")"));
  }
  if (header_len > size_ - 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("header length ", header_len, " is larger than the file (", size_, " bytes)"));
  }
  data_offset_ = 8 + header_len;
  const uint64_t data_size = size_ - data_offset_;
  const std::string_view text(reinterpret_cast<const char*>(data_ + 8), header_len);
  ASSIGN_OR_RETURN(const json header, ParseHeaderJson(text));
  if (!header.is_object()) return absl::InvalidArgumentError("header is not a JSON object");

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return absl::InvalidArgumentError("__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("__metadata__ value \"", mk, "\" is not a string"));
        }
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsTensorInfo t, ParseTensor(key, value, data_size));
    tensors_.push_back(std::move(t));
  }

  // The format requires the tensors to tile the data region exactly, in offset order.
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const SafetensorsTensorInfo* prev = nullptr;
  for (const SafetensorsTensorInfo& t : tensors_) {
    if (t.begin < expected) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" [", t.begin, ", ",
                                                     t.end, ") overlaps tensor \"", prev->name,
                                                     "\" [", prev->begin, ", ", prev->end, ")"));
    }
    if (t.begin > expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("data region is not contiguous: ", t.begin - expected,
                       " unused bytes before "
                       "tensor \"",
                       t.name, "\""));
    }
    expected = t.end;
    prev = &t;
  }
  if (expected != data_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("data region is not contiguous: ", data_size - expected,
                     " trailing bytes not covered by any tensor"));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  return absl::OkStatus();
}

const SafetensorsTensorInfo* SafetensorsFile::Find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Span<const uint8_t> SafetensorsFile::TensorData(const SafetensorsTensorInfo& info) const {
  return absl::Span<const uint8_t>(data_ + data_offset_ + info.begin, info.end - info.begin);
}

absl::Status SafetensorsFile::ReadValues(const SafetensorsTensorInfo& info, uint64_t first,
                                         uint64_t n, float* out) const {
  if (info.dtype != "F32" && info.dtype != "F16" && info.dtype != "BF16") {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", info.name, "\" has dtype ",
                                                   info.dtype,
                                                   ", which is not supported (F32, F16, BF16)"));
  }
  if (first > info.n_values || n > info.n_values - first) {
    return absl::OutOfRangeError(absl::StrCat("tensor \"", info.name, "\": values [", first, ", +",
                                              n, ") past its ", info.n_values, " values"));
  }
  const uint8_t* p = data_ + data_offset_ + info.begin + first * info.element_bytes;
  if (info.dtype == "F32") {
    std::memcpy(out, p, n * sizeof(float));
    return absl::OkStatus();
  }
  const bool bf16 = info.dtype == "BF16";
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t v = static_cast<uint16_t>(p[2 * i] | p[2 * i + 1] << 8);
    out[i] = bf16 ? Bf16ToFloat(v) : HalfToFloat(v);
  }
  return absl::OkStatus();
}

}  // namespace tpserve::model
