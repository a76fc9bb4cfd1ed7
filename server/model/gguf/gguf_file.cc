#include "server/model/gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"

namespace tpserve::model {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr int kMaxDims = 4;
// Smallest possible encodings, used to refuse counts that cannot fit in the bytes left
// before anything is allocated from them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

// absl::string_view is not std::string_view in this Abseil build; bridges for StrCat.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Quoted, escaped name for messages (keys and tensor names come from untrusted files).
std::string Quote(std::string_view s) { return absl::StrCat("'", absl::CHexEscape(Sv(s)), "'"); }

// Smallest encoding of one value of `type`, or 0 for an unknown type.
uint64_t MinValueBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString:  // the length alone
      return 8;
    case GgufValueType::kArray:  // element type + count
      return 12;
  }
  return 0;
}

// Sequential little-endian reader over the file bytes; every read is bounds-checked and a
// failure names what was being read, for which key or tensor, and at which offset.
class Reader {
 public:
  Reader(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  absl::Status Need(uint64_t n, absl::string_view what, absl::string_view where) const {
    if (n <= left()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("truncated file: ", what, where.empty() ? "" : " of ", where, " at offset ",
                     pos_, " needs ", n, " bytes but only ", left(), " remain"));
  }

  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what, absl::string_view where) {
    RETURN_IF_ERROR(Need(sizeof(T), what, where));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // A GGUF string: uint64 length, then that many bytes (not NUL-terminated).
  absl::StatusOr<std::string> ReadString(absl::string_view what, absl::string_view where) {
    const uint64_t at = pos_;
    ASSIGN_OR_RETURN(const uint64_t len, Read<uint64_t>(what, where));
    if (len > left()) {
      return absl::InvalidArgumentError(
          absl::StrCat("string length ", len, " of ", what, where.empty() ? "" : " of ", where,
                       " at offset ", at, " exceeds the ", left(), " bytes left in the file"));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

absl::StatusOr<GgufValue> ReadValue(Reader& r, GgufValueType type, int depth,
                                    absl::string_view key);

// Reads the body of an array value (element type, count, elements) into `out`.
absl::Status ReadArray(Reader& r, int depth, absl::string_view key, GgufValue& out) {
  if (depth >= kGgufMaxArrayDepth) {
    return absl::InvalidArgumentError(absl::StrCat("metadata key ", key,
                                                   ": arrays nested deeper than ",
                                                   kGgufMaxArrayDepth, " at offset ", r.pos()));
  }
  const uint64_t type_at = r.pos();
  ASSIGN_OR_RETURN(const uint32_t raw_type, r.Read<uint32_t>("array element type", key));
  const auto elem_type = static_cast<GgufValueType>(raw_type);
  const uint64_t min_bytes = MinValueBytes(elem_type);
  if (min_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("unknown array element type ", raw_type,
                                                   " for metadata key ", key, " at offset ",
                                                   type_at));
  }
  const uint64_t count_at = r.pos();
  ASSIGN_OR_RETURN(const uint64_t count, r.Read<uint64_t>("array length", key));
  if (count > r.left() / min_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "array length ", count, " of metadata key ", key, " at offset ", count_at,
        " cannot fit in the ", r.left(), " bytes left (", Sv(GgufValueTypeName(elem_type)),
        " elements need at least ", min_bytes, " bytes each)"));
  }
  out.type = GgufValueType::kArray;
  out.array_type = elem_type;
  std::vector<GgufValue> elems;
  elems.reserve(count);  // bounded by the bytes left, checked above
  for (uint64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(GgufValue v, ReadValue(r, elem_type, depth + 1, key));
    elems.push_back(std::move(v));
  }
  out.value = std::move(elems);
  return absl::OkStatus();
}

// A value of a fixed-size `type`, read as T and kept widened to W (integers to 64 bits, floats
// to double); `what` names it in errors ("uint8 value").
template <typename T, typename W>
absl::StatusOr<GgufValue> ReadScalar(Reader& r, GgufValueType type, absl::string_view what,
                                     absl::string_view key) {
  ASSIGN_OR_RETURN(const T x, r.Read<T>(what, key));
  GgufValue v;
  v.type = type;
  v.value = W{x};
  return v;
}

// A bool: one byte, 0 or 1.
absl::StatusOr<GgufValue> ReadBool(Reader& r, absl::string_view key) {
  const uint64_t at = r.pos();
  ASSIGN_OR_RETURN(const uint8_t x, r.Read<uint8_t>("bool value", key));
  if (x > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid bool value ", x, " for metadata key ", key, " at offset ", at));
  }
  GgufValue v;
  v.type = GgufValueType::kBool;
  v.value = x != 0;
  return v;
}

// Reads one value of `type`; `depth` is the number of enclosing arrays.
absl::StatusOr<GgufValue> ReadValue(Reader& r, GgufValueType type, int depth,
                                    absl::string_view key) {
  using T = GgufValueType;
  switch (type) {
    case T::kUint8:
      return ReadScalar<uint8_t, uint64_t>(r, type, "uint8 value", key);
    case T::kInt8:
      return ReadScalar<int8_t, int64_t>(r, type, "int8 value", key);
    case T::kUint16:
      return ReadScalar<uint16_t, uint64_t>(r, type, "uint16 value", key);
    case T::kInt16:
      return ReadScalar<int16_t, int64_t>(r, type, "int16 value", key);
    case T::kUint32:
      return ReadScalar<uint32_t, uint64_t>(r, type, "uint32 value", key);
    case T::kInt32:
      return ReadScalar<int32_t, int64_t>(r, type, "int32 value", key);
    case T::kUint64:
      return ReadScalar<uint64_t, uint64_t>(r, type, "uint64 value", key);
    case T::kInt64:
      return ReadScalar<int64_t, int64_t>(r, type, "int64 value", key);
    case T::kFloat32:
      return ReadScalar<float, double>(r, type, "float32 value", key);
    case T::kFloat64:
      return ReadScalar<double, double>(r, type, "float64 value", key);
    case T::kBool:
      return ReadBool(r, key);
    case T::kString: {
      GgufValue v;
      v.type = type;
      ASSIGN_OR_RETURN(v.value, r.ReadString("string value", key));
      return v;
    }
    case T::kArray: {
      GgufValue v;
      RETURN_IF_ERROR(ReadArray(r, depth, key, v));
      return v;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown metadata value type ",
                                                 static_cast<uint32_t>(type), " for key ", key,
                                                 " at offset ", r.pos() - 4));
}

// Reads one tensor info (name, n_dims, dims, type, offset) and derives its sizes.
absl::StatusOr<GgufTensorInfo> ReadTensorInfo(Reader& r, uint64_t index) {
  const std::string where = absl::StrCat("tensor info ", index);
  GgufTensorInfo t;
  ASSIGN_OR_RETURN(t.name, r.ReadString("tensor name", where));
  const std::string name = absl::StrCat("tensor ", Quote(t.name));
  const uint64_t dims_at = r.pos();
  ASSIGN_OR_RETURN(const uint32_t n_dims, r.Read<uint32_t>("n_dims", name));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has n_dims ", n_dims, " at offset ",
                                                   dims_at, " (must be 1..", kMaxDims, ")"));
  }
  uint64_t n_values = 1;
  for (uint32_t i = 0; i < n_dims; ++i) {
    ASSIGN_OR_RETURN(const uint64_t d, r.Read<uint64_t>("dimension", name));
    if (d == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has a zero dimension (dims[", i, "]) at offset ", r.pos() - 8));
    }
    if (__builtin_mul_overflow(n_values, d, &n_values) ||
        n_values > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " shape overflows: the product of its dims exceeds 2^63"));
    }
    t.dims.push_back(d);
  }
  const uint64_t type_at = r.pos();
  ASSIGN_OR_RETURN(const uint32_t raw_type, r.Read<uint32_t>("tensor type", name));
  absl::StatusOr<GgmlTypeInfo> type = LookupGgmlType(raw_type);
  if (!type.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " at offset ", type_at, ": ", type.status().message()));
  }
  t.type = *type;
  if (t.dims[0] % static_cast<uint64_t>(t.type.block_values) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " dims[0] = ", t.dims[0],
                                                   " is not a multiple of the ", Sv(t.type.name),
                                                   " block size ", t.type.block_values));
  }
  absl::StatusOr<uint64_t> bytes = BytesForValues(t.type, n_values);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " shape overflows: ", bytes.status().message()));
  }
  t.n_values = n_values;
  t.size_bytes = *bytes;
  ASSIGN_OR_RETURN(t.offset, r.Read<uint64_t>("tensor data offset", name));
  return t;
}

// The fixed header: magic, version, tensor count, metadata count.
struct GgufHeader {
  uint32_t version = 0;
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
};

// Reads the header at the start of `data` and checks that its counts can fit in the file.
absl::StatusOr<GgufHeader> ReadHeader(Reader& r, const uint8_t* data) {
  ASSIGN_OR_RETURN(const uint32_t magic, r.Read<uint32_t>("magic", ""));
  if (magic != kGgufMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad magic: expected \"GGUF\", got \"",
                     absl::CHexEscape(absl::string_view(reinterpret_cast<const char*>(data), 4)),
                     "\" at offset 0"));
  }
  GgufHeader h;
  ASSIGN_OR_RETURN(h.version, r.Read<uint32_t>("version", ""));
  if (h.version == 1) {
    return absl::InvalidArgumentError(
        "unsupported GGUF version 1 (32-bit counts; only versions 2 and 3 are supported)");
  }
  if (h.version != 2 && h.version != 3) {
    const bool swapped = (h.version & 0xFFFF) == 0 && (h.version >> 24) <= 3;
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported GGUF version ", h.version,
                     swapped ? " (a big-endian file? only little-endian is supported)"
                             : " (only versions 2 and 3 are supported)"));
  }
  ASSIGN_OR_RETURN(h.n_tensors, r.Read<uint64_t>("tensor count", ""));
  ASSIGN_OR_RETURN(h.n_kv, r.Read<uint64_t>("metadata kv count", ""));
  if (h.n_kv > r.left() / kMinKvBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata kv count ", h.n_kv, " at offset 16 cannot fit in the ", r.left(), " bytes left"));
  }
  if (h.n_tensors > r.left() / kMinTensorInfoBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor count ", h.n_tensors, " at offset 8 cannot fit in the ", r.left(), " bytes left"));
  }
  return h;
}

// Reads `n_kv` metadata entries (key, value type, value) into `metadata`, in file order, and
// their positions into `index`; a key may appear once.
absl::Status ReadMetadata(Reader& r, uint64_t n_kv,
                          std::vector<std::pair<std::string, GgufValue>>& metadata,
                          absl::flat_hash_map<std::string, size_t>& index) {
  metadata.reserve(n_kv);  // bounded by the bytes left, checked by ReadHeader
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = r.pos();
    ASSIGN_OR_RETURN(std::string key,
                     r.ReadString("metadata key", absl::StrCat("metadata entry ", i)));
    const std::string qkey = Quote(key);
    if (index.contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate metadata key ", qkey, " at offset ", at));
    }
    const uint64_t type_at = r.pos();
    ASSIGN_OR_RETURN(const uint32_t raw_type, r.Read<uint32_t>("value type", qkey));
    const auto type = static_cast<GgufValueType>(raw_type);
    if (MinValueBytes(type) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("unknown metadata value type ", raw_type,
                                                     " for key ", qkey, " at offset ", type_at));
    }
    ASSIGN_OR_RETURN(GgufValue value, ReadValue(r, type, 0, qkey));
    index.emplace(key, metadata.size());
    metadata.emplace_back(std::move(key), std::move(value));
  }
  return absl::OkStatus();
}

// general.alignment when the file sets it (a non-zero power of two), else `alignment`.
absl::StatusOr<uint64_t> Alignment(const GgufFile& file, uint64_t alignment) {
  if (file.Find("general.alignment") == nullptr) return alignment;
  ASSIGN_OR_RETURN(const uint64_t a, file.GetUint("general.alignment"));
  if (a == 0 || (a & (a - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata key 'general.alignment' = ", a, " is not a non-zero power of two"));
  }
  return a;
}

// Reads `n_tensors` tensor infos into `tensors`, in file order, and their positions into
// `index`; a name may appear once.
absl::Status ReadTensorInfos(Reader& r, uint64_t n_tensors, std::vector<GgufTensorInfo>& tensors,
                             absl::flat_hash_map<std::string, size_t>& index) {
  if (n_tensors > r.left() / kMinTensorInfoBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor count ", n_tensors, " cannot fit in the ", r.left(),
                     " bytes left after the metadata (offset ", r.pos(), ")"));
  }
  tensors.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = r.pos();
    ASSIGN_OR_RETURN(GgufTensorInfo t, ReadTensorInfo(r, i));
    if (index.contains(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate tensor name ", Quote(t.name), " at offset ", at));
    }
    index.emplace(t.name, tensors.size());
    tensors.push_back(std::move(t));
  }
  return absl::OkStatus();
}

// Checks that every tensor's data is aligned and lies inside the file, given the data
// section's file offset.
absl::Status CheckTensorData(const std::vector<GgufTensorInfo>& tensors, uint64_t data_offset,
                             uint64_t alignment, uint64_t file_size) {
  if (!tensors.empty() && data_offset > file_size) {
    return absl::InvalidArgumentError(absl::StrCat("truncated file: the data section at offset ",
                                                   data_offset, " starts past the end (size ",
                                                   file_size, ")"));
  }
  for (const GgufTensorInfo& t : tensors) {
    if (t.offset % alignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", Quote(t.name), " offset ", t.offset,
                                                     " is not a multiple of the ", "alignment ",
                                                     alignment));
    }
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(data_offset, t.offset, &begin) ||
        __builtin_add_overflow(begin, t.size_bytes, &end) || end > file_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", Quote(t.name), " data (offset ", t.offset, ", ", t.size_bytes,
                       " bytes, from file offset ", data_offset,
                       ") extends past the end of the file (size ", file_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status AnnotatePath(const absl::Status& s, absl::string_view path) {
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "UINT8";
    case GgufValueType::kInt8:
      return "INT8";
    case GgufValueType::kUint16:
      return "UINT16";
    case GgufValueType::kInt16:
      return "INT16";
    case GgufValueType::kUint32:
      return "UINT32";
    case GgufValueType::kInt32:
      return "INT32";
    case GgufValueType::kFloat32:
      return "FLOAT32";
    case GgufValueType::kBool:
      return "BOOL";
    case GgufValueType::kString:
      return "STRING";
    case GgufValueType::kArray:
      return "ARRAY";
    case GgufValueType::kUint64:
      return "UINT64";
    case GgufValueType::kInt64:
      return "INT64";
    case GgufValueType::kFloat64:
      return "FLOAT64";
  }
  return "UNKNOWN";
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("cannot open ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  auto file = std::unique_ptr<GgufFile>(new GgufFile());
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* m = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot mmap ", path, ": ", std::strerror(err)));
    }
    file->mapping_ = m;
    file->data_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);  // the mapping stays valid
  if (absl::Status s = file->Parse(); !s.ok()) return AnnotatePath(s, path);
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string_view bytes) {
  auto file = std::unique_ptr<GgufFile>(new GgufFile());
  file->owned_.assign(bytes.data(), bytes.size());
  file->data_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  RETURN_IF_ERROR(file->Parse());
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

absl::Status GgufFile::Parse() {
  Reader r(data_, size_);
  ASSIGN_OR_RETURN(const GgufHeader header, ReadHeader(r, data_));
  version_ = header.version;
  RETURN_IF_ERROR(ReadMetadata(r, header.n_kv, metadata_, metadata_index_));
  ASSIGN_OR_RETURN(alignment_, Alignment(*this, alignment_));
  RETURN_IF_ERROR(ReadTensorInfos(r, header.n_tensors, tensors_, tensor_index_));
  // The data section starts at the next multiple of the alignment after the tensor infos.
  const uint64_t pad = (alignment_ - r.pos() % alignment_) % alignment_;
  data_offset_ = r.pos() + pad;  // cannot overflow: pos <= size and alignment <= 2^63
  return CheckTensorData(tensors_, data_offset_, alignment_, size_);
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(Sv(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(Sv(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::Span<const uint8_t> GgufFile::TensorData(const GgufTensorInfo& info) const {
  // Bounds were checked by Parse for every tensor of this file.
  return absl::Span<const uint8_t>(data_ + data_offset_ + info.offset, info.size_bytes);
}

void GgufFile::ReleaseResidentPages() const {
  if (mapping_ != nullptr) ::madvise(mapping_, size_, MADV_DONTNEED);
}

}  // namespace tpserve::model
