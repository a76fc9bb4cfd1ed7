#include "server/common/proto_wire_tally.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace tpserve {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

constexpr int kMaxDepth = 16;

// Values in a packed run of `field`: varints end at bytes below 0x80; fixed-width ones are
// 4 or 8 bytes each.
int64_t PackedCount(const FieldDescriptor& field, std::string_view payload) {
  switch (
      WireFormatLite::WireTypeForFieldType(static_cast<WireFormatLite::FieldType>(field.type()))) {
    case WireFormatLite::WIRETYPE_FIXED32:
      return static_cast<int64_t>(payload.size() / 4);
    case WireFormatLite::WIRETYPE_FIXED64:
      return static_cast<int64_t>(payload.size() / 8);
    default: {
      int64_t n = 0;
      for (char c : payload) n += (static_cast<unsigned char>(c) & 0x80) == 0 ? 1 : 0;
      return n;
    }
  }
}

void Tally(const Descriptor& type, std::string_view wire, int depth, WireTallies* out) {
  if (depth > kMaxDepth) return;  // protobuf's own recursion limit applies later
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                                            static_cast<int>(wire.size()));
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return;
    const FieldDescriptor* field = type.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return;
      if (field != nullptr) ++(*out)[field].elements;
      continue;
    }
    uint32_t length = 0;
    if (!in.ReadVarint32(&length) || length > wire.size()) return;
    const int at = in.CurrentPosition();
    if (static_cast<size_t>(at) + length > wire.size() || !in.Skip(static_cast<int>(length))) {
      return;
    }
    if (field == nullptr) continue;
    const std::string_view payload = wire.substr(static_cast<size_t>(at), length);
    WireTally& t = (*out)[field];
    t.bytes += length;
    if (field->is_packable()) {
      t.elements += PackedCount(*field, payload);
    } else {
      ++t.elements;
      if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
        Tally(*field->message_type(), payload, depth + 1, out);
      }
    }
  }
}

}  // namespace

WireTallies TallyWireFields(const Descriptor& type, std::string_view wire) {
  WireTallies out;
  Tally(type, wire, 0, &out);
  return out;
}

}  // namespace tpserve
