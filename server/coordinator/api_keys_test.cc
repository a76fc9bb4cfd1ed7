#include "server/coordinator/api_keys.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tpserve::coordinator {
namespace {

using ::testing::ElementsAre;

// A key file in the test's temporary directory, removed at the end.
class KeyFile {
 public:
  explicit KeyFile(const std::string& name)
      : path_(absl::StrCat(::testing::TempDir(), "/", name, ".", getpid())) {}
  ~KeyFile() { std::remove(path_.c_str()); }
  // Written whole, then renamed over the old file (as a rotation would).
  void Write(const std::string& text) const {
    const std::string tmp = path_ + ".tmp";
    std::ofstream(tmp, std::ios::binary | std::ios::trunc) << text;
    ASSERT_EQ(std::rename(tmp.c_str(), path_.c_str()), 0);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ParseApiKeys, SkipsBlankLinesAndCommentsAndStripsWhitespace) {
  EXPECT_THAT(ParseApiKeys("# comment\n\nalpha\n  beta \t\r\n   \n#gamma\ndelta"),
              ElementsAre("alpha", "beta", "delta"));
  EXPECT_TRUE(ParseApiKeys("").empty());
  EXPECT_TRUE(ParseApiKeys("# only\n\n").empty());
}

TEST(ApiKeys, AcceptsEveryKeyOfTheFileAsBearer) {
  KeyFile file("keys-accept");
  file.Write("# keys\nalpha-key\n\nbeta-key\n");
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(file.path());
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ((*keys)->size(), 2u);
  EXPECT_TRUE((*keys)->Check("Bearer alpha-key").ok());
  EXPECT_TRUE((*keys)->Check("Bearer beta-key").ok());
  EXPECT_TRUE((*keys)->Check("bearer beta-key").ok());  // the scheme is case-insensitive
}

TEST(ApiKeys, RefusesWhatIsMissingOrWrongWithoutQuotingTheKey) {
  KeyFile file("keys-refuse");
  file.Write("alpha-key\n");
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(file.path());
  ASSERT_TRUE(keys.ok()) << keys.status();
  struct Case {
    std::string authorization;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{{"", "missing"},
                                         {"alpha-key", "Bearer <key>"},
                                         {"Basic alpha-key", "Bearer <key>"},
                                         {"Bearer", "Bearer <key>"},
                                         {"Bearer ", "empty"},
                                         {"Bearer    ", "empty"},
                                         {"Bearer wrong-key", "not accepted"},
                                         {"Bearer alpha-ke", "not accepted"},
                                         {"Bearer alpha-key2", "not accepted"},
                                         {"Bearer ALPHA-KEY", "not accepted"},
                                         {"Bearer # keys", "not accepted"}}) {
    absl::Status status = (*keys)->Check(c.authorization);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << c.authorization;
    EXPECT_NE(status.message().find(c.says), std::string::npos)
        << c.authorization << ": " << status.message();
    EXPECT_EQ(status.message().find("alpha"), std::string::npos) << status.message();
  }
}

TEST(ApiKeys, LoadFailsNamingTheFlag) {
  KeyFile missing("keys-missing");
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(missing.path());
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(keys.status().message().find("--api_key_file"), std::string::npos);

  KeyFile empty("keys-empty");
  empty.Write("# nothing but comments\n\n");
  keys = ApiKeys::Load(empty.path());
  ASSERT_FALSE(keys.ok());
  EXPECT_NE(keys.status().message().find("holds no key"), std::string::npos);
}

TEST(ApiKeys, ReloadsWhenTheFileChanges) {
  KeyFile file("keys-reload");
  file.Write("old-key\n");
  // Interval zero: every Check looks at the file.
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(file.path(), absl::ZeroDuration());
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_TRUE((*keys)->Check("Bearer old-key").ok());
  file.Write("new-key\nother-key\n");
  EXPECT_FALSE((*keys)->Check("Bearer old-key").ok());
  EXPECT_TRUE((*keys)->Check("Bearer new-key").ok());
  EXPECT_EQ((*keys)->size(), 2u);
}

TEST(ApiKeys, KeepsItsKeysWhenTheFileGoesAway) {
  KeyFile file("keys-gone");
  file.Write("kept-key\n");
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(file.path(), absl::ZeroDuration());
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(std::remove(file.path().c_str()), 0);
  EXPECT_TRUE((*keys)->Check("Bearer kept-key").ok());
}

TEST(ApiKeys, LooksAtTheFileAtMostOncePerInterval) {
  KeyFile file("keys-interval");
  file.Write("first-key\n");
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(file.path(), absl::Hours(1));
  ASSERT_TRUE(keys.ok()) << keys.status();
  file.Write("second-key\n");
  // Within the interval the change is not seen yet ...
  EXPECT_TRUE((*keys)->Check("Bearer first-key").ok());
  EXPECT_FALSE((*keys)->Check("Bearer second-key").ok());
  // ... until it is looked at.
  (*keys)->ReloadIfChanged();
  EXPECT_FALSE((*keys)->Check("Bearer first-key").ok());
  EXPECT_TRUE((*keys)->Check("Bearer second-key").ok());
}

}  // namespace
}  // namespace tpserve::coordinator
