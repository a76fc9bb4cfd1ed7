// GgufFile's typed metadata getters (the parser is in gguf_file.cc).
#include <limits>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/gguf/gguf_file.h"

namespace tpserve::model {
namespace {

// absl::string_view is not std::string_view in this Abseil build; bridges for StrCat.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status Mismatch(absl::string_view key, const GgufValue& v, absl::string_view wanted) {
  std::string got(Sv(GgufValueTypeName(v.type)));
  if (v.type == GgufValueType::kArray) {
    absl::StrAppend(&got, " of ", Sv(GgufValueTypeName(v.array_type)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("metadata key '", key, "' is ", got, ", expected ", wanted));
}

// Integer values are stored as uint64_t (unsigned types) or int64_t (signed types).
absl::StatusOr<int64_t> AsInt(absl::string_view key, const GgufValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.value)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key '", key, "' value ", *u, " does not fit in int64"));
    }
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v.value)) return *i;
  return Mismatch(key, v, "an integer");
}

absl::StatusOr<double> AsFloat(absl::string_view key, const GgufValue& v) {
  if (const auto* d = std::get_if<double>(&v.value)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v.value)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v.value)) return static_cast<double>(*i);
  return Mismatch(key, v, "a float or an integer");
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key_in) const {
  const absl::string_view key = Sv(key_in);
  const GgufValue* v = Find(key_in);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata key '", key, "' not found"));
  if (const auto* s = std::get_if<std::string>(&v->value)) return *s;
  return Mismatch(key, *v, "STRING");
}

absl::StatusOr<uint64_t> GgufFile::GetUint(std::string_view key_in) const {
  const absl::string_view key = Sv(key_in);
  const GgufValue* v = Find(key_in);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata key '", key, "' not found"));
  if (const auto* u = std::get_if<uint64_t>(&v->value)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v->value)) {
    if (*i < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key '", key, "' is negative (", *i, "), expected >= 0"));
    }
    return static_cast<uint64_t>(*i);
  }
  return Mismatch(key, *v, "a non-negative integer");
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key_in) const {
  const absl::string_view key = Sv(key_in);
  const GgufValue* v = Find(key_in);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata key '", key, "' not found"));
  return AsInt(key, *v);
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key_in) const {
  const absl::string_view key = Sv(key_in);
  const GgufValue* v = Find(key_in);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata key '", key, "' not found"));
  return AsFloat(key, *v);
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key_in) const {
  const absl::string_view key = Sv(key_in);
  const GgufValue* v = Find(key_in);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata key '", key, "' not found"));
  if (const auto* b = std::get_if<bool>(&v->value)) return *b;
  return Mismatch(key, *v, "BOOL");
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key_in) const {
  const absl::string_view key = Sv(key_in);
  const GgufValue* v = Find(key_in);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata key '", key, "' not found"));
  const auto* elems = std::get_if<std::vector<GgufValue>>(&v->value);
  if (elems == nullptr || v->array_type != GgufValueType::kString) {
    return Mismatch(key, *v, "ARRAY of STRING");
  }
  std::vector<std::string> out;
  out.reserve(elems->size());
  for (const GgufValue& e : *elems) out.push_back(std::get<std::string>(e.value));
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key_in) const {
  const absl::string_view key = Sv(key_in);
  const GgufValue* v = Find(key_in);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata key '", key, "' not found"));
  const auto* elems = std::get_if<std::vector<GgufValue>>(&v->value);
  if (elems == nullptr) return Mismatch(key, *v, "ARRAY of integers");
  std::vector<int64_t> out;
  out.reserve(elems->size());
  for (const GgufValue& e : *elems) {
    ASSIGN_OR_RETURN(const int64_t i, AsInt(key, e));  // a non-integer or an int64 overflow
    out.push_back(i);
  }
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(std::string_view key_in) const {
  const absl::string_view key = Sv(key_in);
  const GgufValue* v = Find(key_in);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata key '", key, "' not found"));
  const auto* elems = std::get_if<std::vector<GgufValue>>(&v->value);
  if (elems == nullptr) return Mismatch(key, *v, "ARRAY of floats");
  std::vector<double> out;
  out.reserve(elems->size());
  for (const GgufValue& e : *elems) {
    ASSIGN_OR_RETURN(const double d, AsFloat(key, e));
    out.push_back(d);
  }
  return out;
}

}  // namespace tpserve::model
