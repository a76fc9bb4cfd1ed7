#include "server/common/flags/sampling_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"

namespace {

// The nine flags, by name, with the server's defaults as absl prints them.
TEST(SamplingFlagsTest, NineFlagsWithTheServersDefaults) {
  struct Expected {
    const char* name;
    const char* default_value;
  };
  const Expected expected[] = {
      {"temperature", "0"},
      {"top_k", "0"},
      {"top_p", "1"},
      {"min_p", "0"},
      {"seed", "0"},
      {"logprobs", "0"},
      {"repetition_penalty", "1"},
      {"frequency_penalty", "0"},
      {"presence_penalty", "0"},
  };
  for (const auto& [name, default_value] : expected) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    ASSERT_NE(flag, nullptr) << name;
    EXPECT_EQ(flag->DefaultValue(), default_value) << name;
  }
  EXPECT_EQ(absl::GetFlag(FLAGS_temperature), 0.0f);  // greedy
}

}  // namespace

namespace tpserve {
namespace {

absl::StatusOr<StopFlags> Read(std::vector<std::string> args) {
  args.insert(args.begin(), "tpserve");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ReadStopFlags(static_cast<int>(argv.size()), argv.data());
}

TEST(StopFlagsTest, OccurrencesAddUpAndSplitAtCommas) {
  const absl::StatusOr<StopFlags> flags =
      Read({"--stop=a,b", "--prompt=x,y", "--stop", "c d", "--stop_token_ids=7,8",
            "--stop_token_ids", "9", "--", "--stop=ignored"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->stop, (std::vector<std::string>{"a", "b", "c d"}));
  EXPECT_EQ(flags->stop_token_ids, (std::vector<int32_t>{7, 8, 9}));
}

TEST(StopFlagsTest, NoneGivenIsEmpty) {
  const absl::StatusOr<StopFlags> flags = Read({"--prompt=hi"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(flags->stop.empty());
  EXPECT_TRUE(flags->stop_token_ids.empty());
}

TEST(StopFlagsTest, ANonIntegerStopTokenIdNamesTheFlag) {
  const absl::StatusOr<StopFlags> flags = Read({"--stop_token_ids=7,x"});
  EXPECT_TRUE(absl::IsInvalidArgument(flags.status())) << flags.status();
  EXPECT_NE(flags.status().message().find("--stop_token_ids: 'x'"), std::string::npos);
}

}  // namespace
}  // namespace tpserve
