#include "server/model/chat/chat_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tpserve::model {
namespace {

std::vector<std::pair<size_t, size_t>> Ranges(const ChatText& t) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const ByteRange& r : t.content()) out.emplace_back(r.begin, r.end);
  return out;
}

using Pairs = std::vector<std::pair<size_t, size_t>>;

TEST(ChatTextTest, RecordsContentRanges) {
  ChatText t;
  t.AppendMarkup("<|im_start|>user\n");
  t.AppendContent("hi");
  t.AppendContent(" there");  // adjacent: merged
  t.AppendContent("");        // nothing
  t.AppendMarkup("<|im_end|>");
  EXPECT_EQ(t.text(), "<|im_start|>user\nhi there<|im_end|>");
  EXPECT_EQ(Ranges(t), (Pairs{{17, 25}}));
}

TEST(ChatTextTest, AppendShiftsRanges) {
  ChatText a, b;
  a.AppendMarkup("[A]");
  a.AppendContent("x");
  b.AppendMarkup("[B]");
  b.AppendContent("yy");
  b.AppendMarkup("!");
  a.Append(b);
  EXPECT_EQ(a.text(), "[A]x[B]yy!");
  EXPECT_EQ(Ranges(a), (Pairs{{3, 4}, {7, 9}}));
}

TEST(ChatTextTest, StrippedClipsRanges) {
  ChatText t;
  t.AppendContent("  a ");
  t.AppendMarkup("<m>");
  t.AppendContent(" b  ");
  ChatText s = t.Stripped();
  EXPECT_EQ(s.text(), "a <m> b");
  EXPECT_EQ(Ranges(s), (Pairs{{0, 2}, {5, 7}}));
  ChatText blank;
  blank.AppendMarkup("<m>");
  blank.AppendContent("   ");
  EXPECT_EQ(blank.Stripped().text(), "<m>");
  EXPECT_TRUE(blank.Stripped().content().empty());
}

}  // namespace
}  // namespace tpserve::model
