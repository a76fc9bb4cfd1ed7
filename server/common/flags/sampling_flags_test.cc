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

namespace tpserve {
namespace {

TEST(SamplingFlagsToRequestTest, AllSetsEveryFieldGivenOnlyThoseNamed) {
  absl::FlagSaver restore;
  absl::SetFlag(&FLAGS_temperature, 0.5f);
  absl::SetFlag(&FLAGS_top_k, 7);
  absl::SetFlag(&FLAGS_typical_p, 0.9f);
  absl::SetFlag(&FLAGS_logprobs, 3u);
  std::vector<std::string> words = {"tpserve", "--temperature=0.5", "--stop=a,b",
                                    "--stop_token_ids", "5"};
  words.reserve(8);  // argv points into them: no reallocation
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  const int argc = static_cast<int>(argv.size());

  tpserve::v1::GenerateRequest all;
  ASSERT_TRUE(SamplingFlagsToRequest(argc, argv.data(), SamplingFlagSet::kAll, &all).ok());
  EXPECT_EQ(all.temperature(), 0.5f);
  EXPECT_EQ(all.top_k(), 7);
  EXPECT_TRUE(all.has_top_p());
  EXPECT_EQ(all.typical_p(), 0.9f);
  EXPECT_TRUE(all.has_seed());
  EXPECT_EQ(all.logprobs(), 3u);
  EXPECT_EQ(all.stop_size(), 2);
  ASSERT_EQ(all.stop_token_ids_size(), 1);
  EXPECT_EQ(all.stop_token_ids(0), 5);

  tpserve::v1::GenerateRequest given;
  ASSERT_TRUE(SamplingFlagsToRequest(argc, argv.data(), SamplingFlagSet::kGiven, &given).ok());
  EXPECT_EQ(given.temperature(), 0.5f);
  EXPECT_FALSE(given.has_top_k());  // set, but not on the command line: the server's default
  EXPECT_FALSE(given.has_typical_p());
  EXPECT_FALSE(given.has_seed());
  EXPECT_EQ(given.logprobs(), 3u);
  EXPECT_EQ(given.stop_size(), 2);

  words.push_back("--stop_token_ids=x");
  argv.push_back(words.back().data());
  const absl::Status bad = SamplingFlagsToRequest(static_cast<int>(argv.size()), argv.data(),
                                                  SamplingFlagSet::kAll, &all);
  EXPECT_EQ(bad.message(), "--stop_token_ids: 'x' is not an integer");
}

}  // namespace
}  // namespace tpserve
