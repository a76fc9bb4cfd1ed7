#include "server/common/flags/sampling_flags.h"

#include <gtest/gtest.h>

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
