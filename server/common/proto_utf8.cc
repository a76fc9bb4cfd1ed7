#include "server/common/proto_utf8.h"

#include <cstdint>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/wire_format_lite.h"

namespace tpserve {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

constexpr int kMaxDepth = 16;

// Byte offset of the first invalid sequence, or npos.
size_t FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000;
    } else {
      return i;
    }
    if (i + static_cast<size_t>(len) > s.size()) return i;
    uint32_t cp = c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += static_cast<size_t>(len);
  }
  return std::string_view::npos;
}

absl::Status Check(const Descriptor& type, std::string_view wire, const std::string& path,
                   int depth) {
  if (depth > kMaxDepth) return absl::OkStatus();  // protobuf's own limits apply later
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                                            static_cast<int>(wire.size()));
  std::map<int, int> seen;  // field number -> occurrences, for repeated field indices
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return absl::OkStatus();
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    const FieldDescriptor* field = type.FindFieldByNumber(number);
    const bool delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    const bool text = field != nullptr && field->type() == FieldDescriptor::TYPE_STRING;
    const bool nested = field != nullptr && field->type() == FieldDescriptor::TYPE_MESSAGE;
    if (!delimited || (!text && !nested)) {
      if (!WireFormatLite::SkipField(&in, tag)) return absl::OkStatus();
      continue;
    }
    uint32_t length = 0;
    std::string value;
    if (!in.ReadVarint32(&length) || !in.ReadString(&value, static_cast<int>(length))) {
      return absl::OkStatus();
    }
    std::string name = absl::StrCat(path, path.empty() ? "" : ".", field->name());
    const int index = seen[number]++;
    if (field->is_repeated()) absl::StrAppend(&name, "[", index, "]");
    if (text) {
      const size_t bad = FirstInvalidUtf8(value);
      if (bad != std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": invalid UTF-8 at byte ", bad));
      }
    } else {
      absl::Status status = Check(*field->message_type(), value, name, depth + 1);
      if (!status.ok()) return status;
    }
  }
}

}  // namespace

absl::Status CheckUtf8Fields(const Descriptor& type, std::string_view wire) {
  return Check(type, wire, "", 0);
}

}  // namespace tpserve
