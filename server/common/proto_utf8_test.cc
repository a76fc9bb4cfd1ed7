// CheckUtf8Fields on GenerateRequest: names the field (with its index when repeated, nested
// fields by path), accepts valid text of every width, and leaves malformed input to protobuf.
#include "server/common/proto_utf8.h"

#include <gtest/gtest.h>

#include <string>

#include "tpserve/v1/generate.pb.h"

namespace tpserve {
namespace {

using tpserve::v1::GenerateRequest;

// Serialises `request` with the placeholder "@@" replaced by raw `bytes`.
std::string WithBytes(const GenerateRequest& request, const std::string& bytes) {
  std::string wire = request.SerializeAsString();
  const size_t at = wire.find("@@");
  EXPECT_NE(at, std::string::npos);
  // Same length, so the length prefix stays right.
  EXPECT_EQ(bytes.size(), 2u);
  wire.replace(at, 2, bytes);
  return wire;
}

TEST(ProtoUtf8Test, ValidTextPasses) {
  GenerateRequest r;
  r.set_prompt("plain, é, 日本, 🙂");
  r.add_stop("x");
  r.add_messages()->set_content("ü");
  EXPECT_TRUE(CheckUtf8Fields(*GenerateRequest::descriptor(), r.SerializeAsString()).ok());
}

TEST(ProtoUtf8Test, NamesTheField) {
  GenerateRequest r;
  r.set_prompt("ab@@");
  absl::Status s = CheckUtf8Fields(*GenerateRequest::descriptor(), WithBytes(r, "\xff\xfe"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "prompt: invalid UTF-8 at byte 2");
}

TEST(ProtoUtf8Test, NamesRepeatedAndNestedFields) {
  GenerateRequest r;
  r.add_stop("ok");
  r.add_stop("@@");
  absl::Status s = CheckUtf8Fields(*GenerateRequest::descriptor(), WithBytes(r, "\xc3\x28"));
  EXPECT_EQ(s.message(), "stop[1]: invalid UTF-8 at byte 0") << s;
  GenerateRequest m;
  m.add_messages()->set_content("fine");
  m.add_messages()->set_content("a@@");
  s = CheckUtf8Fields(*GenerateRequest::descriptor(), WithBytes(m, "\xed\xa0"));
  EXPECT_EQ(s.message(), "messages[1].content: invalid UTF-8 at byte 1") << s;
}

TEST(ProtoUtf8Test, RejectsOverlongAndSurrogates) {
  GenerateRequest r;
  r.set_request_id("@@");
  EXPECT_FALSE(
      CheckUtf8Fields(*GenerateRequest::descriptor(), WithBytes(r, "\xc0\xaf")).ok());  // overlong
  r.set_request_id("@@x");
  EXPECT_FALSE(CheckUtf8Fields(*GenerateRequest::descriptor(), WithBytes(r, "\xe2\x82")).ok());
}

TEST(ProtoUtf8Test, MalformedWireIsLeftToTheParser) {
  EXPECT_TRUE(CheckUtf8Fields(*GenerateRequest::descriptor(), "\x0a\x50truncated").ok());
  EXPECT_TRUE(CheckUtf8Fields(*GenerateRequest::descriptor(), "").ok());
}

}  // namespace
}  // namespace tpserve
