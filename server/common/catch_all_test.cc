#include "server/common/catch_all.h"

#include <stdexcept>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

TEST(CatchAllTest, RunsTheWorkAndSaysOkWhenItEnds) {
  int runs = 0;
  EXPECT_TRUE(CatchAll("work", [&] { ++runs; }).ok());
  EXPECT_EQ(runs, 1);
}

TEST(CatchAllTest, TurnsAnyExceptionIntoAnInternalStatusNamingTheWork) {
  const absl::Status thrown =
      CatchAll("connection 3", [] { throw std::length_error("field value too large"); });
  EXPECT_EQ(thrown.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(thrown.message(), HasSubstr("connection 3: ended on an exception: field value"));
  const absl::Status odd = CatchAll("step loop", [] { throw 7; });
  EXPECT_THAT(odd.message(), HasSubstr("step loop: ended on an exception: an exception of"));
}

}  // namespace
}  // namespace tpserve
