#include "server/model/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace tpserve::model {
namespace {

TEST(Utf8Test, Validity) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80"));  // a é 你 😀
  size_t offset = 0;
  EXPECT_FALSE(IsValidUtf8("ab\xC0\xAF", &offset));  // overlong
  EXPECT_EQ(offset, 2u);
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE4\xBD"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\x80"));
}

TEST(Utf8Test, CompletePrefixHoldsBackOnlyAnIncompleteTail) {
  EXPECT_EQ(Utf8CompletePrefixLength("ab\xF0\x9F\x98"), 2u);  // 😀 missing its last byte
  EXPECT_EQ(Utf8CompletePrefixLength("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(Utf8CompletePrefixLength("\xE4"), 0u);
  EXPECT_EQ(Utf8CompletePrefixLength("\x80"), 1u);          // can never complete
  EXPECT_EQ(Utf8CompletePrefixLength("\xE4\x41"), 2u);      // broken, emitted as U+FFFD A
  EXPECT_EQ(Utf8CompletePrefixLength("\xFF\xE4\xBD"), 1u);  // bad byte out, 你 prefix held
}

TEST(Utf8Test, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(Utf8Lossy("a\xE4\xBD"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");  // one U+FFFD for E4 BD
  EXPECT_EQ(Utf8Lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Utf8Test, AppendAndDecodeRoundTrip) {
  for (char32_t cp : {0x41u, 0xE9u, 0x4F60u, 0x1F600u, 0x10FFFFu}) {
    std::string s;
    AppendUtf8(cp, &s);
    const size_t len = Utf8SequenceLength(s, 0);
    ASSERT_EQ(len, s.size());
    EXPECT_EQ(DecodeUtf8At(s, 0, len), cp);
  }
}

TEST(Utf8Test, PythonStrip) {
  EXPECT_EQ(PythonStrip(" \t\n hi there \r\n"), "hi there");
  EXPECT_EQ(PythonStrip("\xE3\x80\x80x\xC2\x85"), "x");      // U+3000, U+0085
  EXPECT_EQ(PythonStrip("\xE2\x80\x8Bx"), "\xE2\x80\x8Bx");  // U+200B is not a space
  EXPECT_EQ(PythonStrip("   "), "");
}

}  // namespace
}  // namespace tpserve::model
