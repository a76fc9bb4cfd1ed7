#include "server/http/request_reader.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve::http {
namespace {

using ::testing::HasSubstr;
using Progress = RequestReader::Progress;

// What a connection makes of `bytes`, fed `piece` bytes at a time: each request's
// "METHOD path body", or "refused <status>: <message>" (and then nothing more); also the
// most bytes the reader held at once.
struct Outcome {
  std::vector<std::string> requests;
  size_t most_buffered = 0;
};

Outcome ReadAll(const std::string& bytes, size_t piece, RequestLimits limits = {}) {
  RequestReader reader(limits);
  Outcome out;
  size_t at = 0;
  while (true) {
    const Progress p = reader.Parse();
    out.most_buffered = std::max(out.most_buffered, reader.buffered());
    if (p == Progress::kHead) continue;
    if (p == Progress::kDone) {
      out.requests.push_back(absl::StrCat(reader.request().method, " ", reader.request().path, " ",
                                          reader.request().body));
      reader.Next();
      continue;
    }
    if (p == Progress::kRefused) {
      out.requests.push_back(
          absl::StrCat("refused ", reader.refusal().status, ": ", reader.refusal().message));
      return out;
    }
    if (at >= bytes.size()) return out;
    reader.Feed(absl::string_view(bytes).substr(at, piece));
    at += piece;
  }
}

const char kChunkedHead[] = "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";

// The request: a trailer field of 70,000 bytes made Beast throw out of the server.
std::string HugeTrailer() {
  return absl::StrCat(kChunkedHead, "3\r\nabc\r\n0\r\nX-T: ", std::string(70000, 'a'), "\r\n\r\n");
}

TEST(RequestReaderTest, ReadsWholeChunkedAndPipelinedRequestsAtAnyPace) {
  const std::string bytes =
      absl::StrCat("POST /a?q=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
                   kChunkedHead, "3;name=value\r\nabc\r\n2\r\nde\r\n0\r\nX-Checksum: 1\r\n\r\n",
                   "GET /b HTTP/1.1\r\nHost: h\r\n\r\n");
  for (size_t piece : {1, 2, 7, 64, 100000}) {
    EXPECT_THAT(ReadAll(bytes, piece).requests,
                ::testing::ElementsAre("POST /a hello", "POST /c abcde", "GET /b "))
        << piece;
  }
}

TEST(RequestReaderTest, TellsTheHeadBeforeParsingTheBody) {
  RequestReader reader({});
  reader.Feed("POST /a HTTP/1.1\r\nAuthorization: k\r\nContent-Length: 3\r\n\r\nabc");
  ASSERT_EQ(reader.Parse(), Progress::kHead);
  EXPECT_EQ(reader.request().Header("authorization"), "k");
  EXPECT_EQ(reader.request().body, "");
  EXPECT_TRUE(reader.keep_alive());
  ASSERT_EQ(reader.Parse(), Progress::kDone);
  EXPECT_EQ(reader.request().body, "abc");
}

TEST(RequestReaderTest, RefusesAHugeTrailerFieldWithoutThrowingOrBufferingIt) {
  for (size_t piece : {1000, 100000}) {
    const Outcome out = ReadAll(HugeTrailer(), piece);
    EXPECT_THAT(out.requests,
                ::testing::ElementsAre("refused 431: trailers: exceed the limit of 16384 bytes"));
    EXPECT_LE(out.most_buffered, 16384u + 64 + piece);
  }
}

TEST(RequestReaderTest, RefusesManySmallTrailerFieldsByCountAndByBytes) {
  std::string few = absl::StrCat(kChunkedHead, "1\r\na\r\n0\r\n");
  for (int i = 0; i < 101; ++i) absl::StrAppend(&few, "t", i, ": v\r\n");
  absl::StrAppend(&few, "\r\n");
  EXPECT_THAT(ReadAll(few, 4096).requests,
              ::testing::ElementsAre("refused 431: trailers: more than 100 fields"));
  std::string many = absl::StrCat(kChunkedHead, "1\r\na\r\n0\r\n");
  for (int i = 0; i < 200000; ++i) absl::StrAppend(&many, "t: v\r\n");
  absl::StrAppend(&many, "\r\n");
  const Outcome out = ReadAll(many, 16384);
  EXPECT_THAT(out.requests[0], HasSubstr("refused 431: trailers: exceed the limit"));
  EXPECT_LE(out.most_buffered, 2u * 16384 + 64);
}

TEST(RequestReaderTest, RefusesTooManyHeadFields) {
  std::string head = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) absl::StrAppend(&head, "h", i, ": v\r\n");
  EXPECT_THAT(ReadAll(absl::StrCat(head, "\r\n"), 512).requests,
              ::testing::ElementsAre("refused 431: headers: more than 100 fields"));
}

TEST(RequestReaderTest, BoundsChunkExtensionsPerLineAndPerRequest) {
  // One line of many MiB, never ended: refused once it passes the bound, not buffered.
  const std::string endless =
      absl::StrCat(kChunkedHead, "1;x=", std::string(8 << 20, 'e'), "\r\na\r\n0\r\n\r\n");
  const Outcome one = ReadAll(endless, 16384);
  EXPECT_THAT(one.requests[0],
              HasSubstr("refused 400: chunk extensions: exceed the limit of 4096 bytes"));
  EXPECT_LE(one.most_buffered, 4096u + 64 + 16384);
  // Many short lines: their extensions add up to the same bound.
  std::string many = kChunkedHead;
  for (int i = 0; i < 100; ++i) absl::StrAppend(&many, "1;", std::string(100, 'e'), "\r\na\r\n");
  absl::StrAppend(&many, "0\r\n\r\n");
  EXPECT_THAT(ReadAll(many, 999).requests[0], HasSubstr("refused 400: chunk extensions"));
  // Under the bound, they are read and dropped.
  std::string few = kChunkedHead;
  for (int i = 0; i < 10; ++i) absl::StrAppend(&few, "1;", std::string(100, 'e'), "\r\na\r\n");
  absl::StrAppend(&few, "0\r\n\r\n");
  EXPECT_THAT(ReadAll(few, 999).requests, ::testing::ElementsAre("POST /c aaaaaaaaaa"));
}

TEST(RequestReaderTest, RefusesAmbiguousFramingRatherThanGuess) {
  struct Case {
    std::string head;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", "Transfer-Encoding: repeated, or"},
      {"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", "Content-Length: malformed"},
      {"Content-Length: 3\r\nContent-Length: 4\r\n", "Content-Length: malformed"},
      {"Content-Length: 3\r\nContent-Length: 3\r\n", "Content-Length: sent twice"},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "Transfer-Encoding"},
      {"Content-Length: 99999999999999999999999\r\n", "Content-Length: malformed"},
      {"Content-Length: -1\r\n", "Content-Length: malformed"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ReadAll(absl::StrCat("POST / HTTP/1.1\r\n", c.head, "\r\nabc"), 4096).requests,
                ::testing::ElementsAre(HasSubstr(absl::StrCat("refused 400: ", c.says))))
        << c.head;
  }
}

TEST(RequestReaderTest, RefusesChunkSizesPastSixtyFourBits) {
  for (const char* size : {"10000000000000000", "ffffffffffffffffff"}) {
    EXPECT_THAT(ReadAll(absl::StrCat(kChunkedHead, size, "\r\nabc\r\n0\r\n\r\n"), 4096).requests,
                ::testing::ElementsAre(HasSubstr("refused 400: chunked body: a malformed chunk")))
        << size;
  }
  // Within 64 bits but past the body limit: 413 before any byte of it is taken.
  EXPECT_THAT(ReadAll(absl::StrCat(kChunkedHead, "ffffffffffffffff\r\nabc"), 4096).requests,
              ::testing::ElementsAre("refused 413: body: exceeds the limit of 4194304 bytes"));
}

TEST(RequestReaderTest, KeepsTheHeadAndBodyLimits) {
  EXPECT_THAT(
      ReadAll(absl::StrCat("GET / HTTP/1.1\r\nX: ", std::string(20000, 'a'), "\r\n\r\n"), 4096)
          .requests,
      ::testing::ElementsAre("refused 431: headers: exceed the limit of 16384 bytes"));
  RequestLimits small;
  small.max_body_bytes = 10;
  EXPECT_THAT(ReadAll("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", 4096, small).requests,
              ::testing::ElementsAre("refused 413: body: exceeds the limit of 10 bytes"));
  EXPECT_THAT(
      ReadAll(absl::StrCat(kChunkedHead, "6\r\nabcdef\r\n6\r\nabcdef\r\n0\r\n\r\n"), 4096, small)
          .requests,
      ::testing::ElementsAre("refused 413: body: exceeds the limit of 10 bytes"));
  EXPECT_THAT(ReadAll("nonsense\r\n\r\n", 4096).requests,
              ::testing::ElementsAre(HasSubstr("refused 400: request: malformed HTTP")));
}

TEST(RequestReaderTest, AnUnfinishedRequestIsSomeButNotDone) {
  RequestReader reader({});
  EXPECT_FALSE(reader.got_some());
  reader.Feed("GET / HT");
  EXPECT_EQ(reader.Parse(), Progress::kMore);
  EXPECT_TRUE(reader.got_some());
}

}  // namespace
}  // namespace tpserve::http
