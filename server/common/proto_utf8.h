// CheckUtf8Fields: finds invalid UTF-8 in the string fields of a serialised message before
// protobuf parses it. Protobuf refuses such a proto3 message outright, which gRPC would
// report as INTERNAL "failed to parse"; the server wants INVALID_ARGUMENT naming the field
// instead. Walks the wire format with the message's descriptor (nested messages included);
// stateless and thread-safe.
#ifndef TPSERVE_SERVER_COMMON_PROTO_UTF8_H_
#define TPSERVE_SERVER_COMMON_PROTO_UTF8_H_

#include <string_view>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"

namespace tpserve {

// OK when every string field of `wire` (a serialised `type`) is valid UTF-8 — or when
// `wire` is malformed in some other way (parsing will report that). InvalidArgument otherwise,
// naming the field path, e.g. "messages[1].content: invalid UTF-8 at byte 3".
absl::Status CheckUtf8Fields(const google::protobuf::Descriptor& type, std::string_view wire);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_PROTO_UTF8_H_
