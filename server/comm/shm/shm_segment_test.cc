// ShmSegment: create / open / unlink against the real /dev/shm, and the removal of segments
// left behind by a dead creator (a real process that exited), never of a live one's.
#include "server/comm/shm/shm_segment.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"

namespace tpserve::comm::shm {
namespace {

bool Exists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

// The pid of a process that has exited and been reaped.
pid_t DeadPid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

TEST(ShmSegmentTest, CreateOpenShareBytesAndUnlinkKeepsMappings) {
  const std::string name = NewSegmentName();
  absl::StatusOr<ShmSegment> a = ShmSegment::Create(name, 8192);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(Exists(name));
  EXPECT_EQ(static_cast<const char*>(a->data())[100], 0) << "a new segment is zero-filled";
  absl::StatusOr<ShmSegment> b = ShmSegment::Open(name, 8192);
  ASSERT_TRUE(b.ok()) << b.status();
  std::strcpy(static_cast<char*>(a->data()), "hello");
  EXPECT_STREQ(static_cast<const char*>(b->data()), "hello");

  EXPECT_FALSE(ShmSegment::Create(name, 8192).ok()) << "a name is created once";
  EXPECT_EQ(ShmSegment::Open(name, 4096).status().code(), absl::StatusCode::kFailedPrecondition)
      << "a size that is not the segment's is refused";
  ASSERT_TRUE(ShmSegment::Unlink(name).ok());
  EXPECT_FALSE(Exists(name));
  EXPECT_EQ(ShmSegment::Unlink(name).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ShmSegment::Open(name, 8192).status().code(), absl::StatusCode::kNotFound);
  std::strcpy(static_cast<char*>(b->data()), "still mapped");
  EXPECT_STREQ(static_cast<const char*>(a->data()), "still mapped");
}

TEST(ShmSegmentTest, NamesCarryPidNamespaceAndPid) {
  const std::string name = NewSegmentName();
  EXPECT_TRUE(name.rfind(absl::StrCat("/tpserve-shm.", PidNamespace(), ".", getpid(), "."), 0) == 0)
      << name;
  EXPECT_NE(NewSegmentName(), name);
  EXPECT_NE(PidNamespace(), 0u);
}

TEST(ShmSegmentTest, RemovesOnlySegmentsOfDeadCreators) {
  const pid_t dead = DeadPid();
  const std::string stale = absl::StrCat("/tpserve-shm.", PidNamespace(), ".", dead, ".0123");
  const std::string live = NewSegmentName();
  const std::string other_ns = absl::StrCat("/tpserve-shm.1.", dead, ".0456");
  for (const std::string& n : {stale, live, other_ns}) {
    ASSERT_TRUE(ShmSegment::Create(n, 4096).ok()) << n;
  }
  const std::vector<std::string> removed = RemoveStaleSegments();
  EXPECT_NE(std::find(removed.begin(), removed.end(), stale.substr(1)), removed.end());
  EXPECT_FALSE(Exists(stale)) << "the dead creator's segment is gone";
  EXPECT_TRUE(Exists(live)) << "a running creator's segment stays";
  EXPECT_TRUE(Exists(other_ns)) << "another pid namespace's segment is not judged";
  ASSERT_TRUE(ShmSegment::Unlink(live).ok());
  ASSERT_TRUE(ShmSegment::Unlink(other_ns).ok());
}

}  // namespace
}  // namespace tpserve::comm::shm
