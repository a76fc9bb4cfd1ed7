// TallyWireFields: counts, per field, the elements a serialised message holds and their
// payload bytes, without parsing it — so that a request's cost (how many chat messages, how
// many stop token ids, ...) can be bounded before protobuf allocates an object for each
// element. Walks the wire format with the message's descriptor (nested messages included);
// stateless and thread-safe.
#ifndef TPSERVE_SERVER_COMMON_PROTO_WIRE_TALLY_H_
#define TPSERVE_SERVER_COMMON_PROTO_WIRE_TALLY_H_

#include <cstdint>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "google/protobuf/descriptor.h"

namespace tpserve {

struct WireTally {
  int64_t elements = 0;  // occurrences; each value of a packed repeated scalar counts
  int64_t bytes = 0;     // payload bytes of length-delimited occurrences (strings, messages)
};

// Keyed by field (of `type` or of a message nested in it, at any depth up to 16). Every
// occurrence on the wire counts, also a singular field written twice (which parsing would
// merge): the tally never under-counts what parsing builds. Stops quietly at malformed input
// (parsing will report it); unknown fields are skipped.
using WireTallies = absl::flat_hash_map<const google::protobuf::FieldDescriptor*, WireTally>;
WireTallies TallyWireFields(const google::protobuf::Descriptor& type, std::string_view wire);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_PROTO_WIRE_TALLY_H_
