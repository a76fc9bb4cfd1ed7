// TallyWireFields on GenerateRequest: counts repeated messages, packed and unpacked scalars,
// nested string bytes, and stops at malformed input without crashing.
#include "server/common/proto_wire_tally.h"

#include <gtest/gtest.h>

#include <string>

#include "tpserve/v1/generate.pb.h"

namespace tpserve {
namespace {

using tpserve::v1::ChatMessage;
using tpserve::v1::GenerateRequest;

const google::protobuf::FieldDescriptor* Field(const google::protobuf::Descriptor& type,
                                               const char* name) {
  const google::protobuf::FieldDescriptor* f = type.FindFieldByName(name);
  EXPECT_NE(f, nullptr) << name;
  return f;
}

WireTally Get(const WireTallies& t, const google::protobuf::FieldDescriptor* f) {
  auto it = t.find(f);
  return it == t.end() ? WireTally{} : it->second;
}

TEST(ProtoWireTallyTest, CountsElementsAndBytes) {
  GenerateRequest r;
  r.set_prompt("hello");
  for (int i = 0; i < 3; ++i) {
    ChatMessage* m = r.add_messages();
    m->set_role("user");
    m->set_content(std::string(static_cast<size_t>(i + 1), 'x'));
  }
  // An empty message: still one element.
  r.add_messages();
  for (int id : {1, 300, 70000}) r.add_stop_token_ids(id);  // packed varints of 1, 2, 3 bytes
  r.add_stop("a");
  r.add_stop("");
  r.set_max_tokens(7);
  const WireTallies t = TallyWireFields(*GenerateRequest::descriptor(), r.SerializeAsString());
  const auto& g = *GenerateRequest::descriptor();
  EXPECT_EQ(Get(t, Field(g, "prompt")).bytes, 5);
  EXPECT_EQ(Get(t, Field(g, "messages")).elements, 4);
  EXPECT_EQ(Get(t, Field(*ChatMessage::descriptor(), "content")).elements, 3);
  EXPECT_EQ(Get(t, Field(*ChatMessage::descriptor(), "content")).bytes, 1 + 2 + 3);
  EXPECT_EQ(Get(t, Field(*ChatMessage::descriptor(), "role")).elements, 3);
  EXPECT_EQ(Get(t, Field(g, "stop_token_ids")).elements, 3);
  EXPECT_EQ(Get(t, Field(g, "stop")).elements, 2);
  EXPECT_EQ(Get(t, Field(g, "max_tokens")).elements, 1);
}

TEST(ProtoWireTallyTest, CountsUnpackedScalarsAndRepeatedSingulars) {
  // stop_token_ids written unpacked (field 14, varint): tag 0x70 then the value, twice;
  // request_id (field 17) written twice: both count.
  std::string wire = "\x70\x05\x70\x06";
  wire += std::string("\x8a\x01\x02", 3) + "id";
  wire += std::string("\x8a\x01\x03", 3) + "abc";
  const WireTallies t = TallyWireFields(*GenerateRequest::descriptor(), wire);
  const auto& g = *GenerateRequest::descriptor();
  EXPECT_EQ(Get(t, Field(g, "stop_token_ids")).elements, 2);
  EXPECT_EQ(Get(t, Field(g, "request_id")).elements, 2);
  EXPECT_EQ(Get(t, Field(g, "request_id")).bytes, 5);
}

TEST(ProtoWireTallyTest, MalformedInputStopsQuietly) {
  GenerateRequest r;
  r.set_prompt("hello");
  std::string wire = r.SerializeAsString();
  wire[1] = 100;  // length past the end
  const WireTallies t = TallyWireFields(*GenerateRequest::descriptor(), wire);
  EXPECT_EQ(Get(t, Field(*GenerateRequest::descriptor(), "prompt")).elements, 0);
  EXPECT_TRUE(TallyWireFields(*GenerateRequest::descriptor(), "\xff\xff\xff").empty());
}

}  // namespace
}  // namespace tpserve
