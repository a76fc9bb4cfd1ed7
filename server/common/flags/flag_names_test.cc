#include "server/common/flags/flag_names.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpserve {
namespace {

// Runs UnderscoreFlagNames over `args` (argv[0] included) and returns what it leaves.
std::vector<std::string> Underscored(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  UnderscoreFlagNames(static_cast<int>(argv.size()), argv.data());
  return args;
}

TEST(FlagNamesTest, DashedNamesBecomeUnderscored) {
  EXPECT_EQ(Underscored({"tpserve-cli", "generate", "--max-tokens", "8", "--top-k=5", "hi"}),
            (std::vector<std::string>{"tpserve-cli", "generate", "--max_tokens", "8", "--top_k=5",
                                      "hi"}));
}

TEST(FlagNamesTest, ValuesAndUnderscoredNamesAreLeftAlone) {
  EXPECT_EQ(
      Underscored({"p", "--output_len=fixed:8", "--stop=a-b", "--prompt-len", "x-y"}),
      (std::vector<std::string>{"p", "--output_len=fixed:8", "--stop=a-b", "--prompt_len", "x-y"}));
}

TEST(FlagNamesTest, ArgvZeroSingleDashesAndEverythingAfterADoubleDashAreLeftAlone) {
  EXPECT_EQ(Underscored({"--argv-zero", "-max-tokens", "--", "--not-a-flag"}),
            (std::vector<std::string>{"--argv-zero", "-max-tokens", "--", "--not-a-flag"}));
}

}  // namespace
}  // namespace tpserve
