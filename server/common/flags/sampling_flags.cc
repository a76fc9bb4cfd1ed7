#include "server/common/flags/sampling_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

ABSL_FLAG(float, temperature, 0.0f, "sampling temperature (0: greedy)");
ABSL_FLAG(int32_t, top_k, 0, "keep the k most likely tokens (0: off)");
ABSL_FLAG(float, top_p, 1.0f, "nucleus sampling mass in (0, 1] (1: off)");
ABSL_FLAG(float, min_p, 0.0f, "drop tokens below min_p times the top one (0: off)");
ABSL_FLAG(float, typical_p, 1.0f, "locally typical sampling mass in (0, 1] (1: off)");
ABSL_FLAG(float, repetition_penalty, 1.0f, "repetition penalty (1: off)");
ABSL_FLAG(float, frequency_penalty, 0.0f, "frequency penalty in [-2, 2]");
ABSL_FLAG(float, presence_penalty, 0.0f, "presence penalty in [-2, 2]");
ABSL_FLAG(uint64_t, seed, 0,
          "random seed: the same seed, the same tokens (tpserve-cli: unset, the server draws one)");
ABSL_FLAG(uint32_t, logprobs, 0, "report this many top alternatives per token (--json)");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "stop strings: the text ends before the first one (comma-separated; repeatable)");
ABSL_FLAG(std::vector<std::string>, stop_token_ids, {},
          "token ids that end the generation besides EOS (comma-separated; repeatable)");

namespace tpserve {
namespace {

// Every value of --`name` on the command line, each split at its commas, in order.
std::vector<std::string> Occurrences(int argc, char** argv, absl::string_view name) {
  const std::string with_value = absl::StrCat("--", name, "=");
  const std::string bare = absl::StrCat("--", name);
  std::vector<std::string> values;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    absl::string_view value;
    if (arg.substr(0, with_value.size()) == with_value) {
      value = arg.substr(with_value.size());
    } else if (arg == bare && i + 1 < argc) {
      value = argv[++i];
    } else {
      continue;
    }
    if (value.empty()) continue;
    for (absl::string_view part : absl::StrSplit(value, ',')) values.emplace_back(part);
  }
  return values;
}

// Whether --`name` (with or without a value) is on the command line argv[1, argc).
bool Given(int argc, char** argv, absl::string_view name) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.substr(0, 2) == "--" && arg.substr(2, arg.find('=') - 2) == name) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<StopFlags> ReadStopFlags(int argc, char** argv) {
  StopFlags flags;
  flags.stop = Occurrences(argc, argv, "stop");
  std::vector<std::string> ids = Occurrences(argc, argv, "stop_token_ids");
  if (flags.stop.empty()) flags.stop = absl::GetFlag(FLAGS_stop);
  if (ids.empty()) ids = absl::GetFlag(FLAGS_stop_token_ids);
  for (const std::string& id : ids) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(id, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--stop_token_ids: '", id, "' is not an integer"));
    }
    flags.stop_token_ids.push_back(value);
  }
  return flags;
}

absl::Status SamplingFlagsToRequest(int argc, char** argv, SamplingFlagSet set,
                                    tpserve::v1::GenerateRequest* request) {
  const auto wanted = [&](absl::string_view name) {
    return set == SamplingFlagSet::kAll || Given(argc, argv, name);
  };
  if (wanted("temperature")) request->set_temperature(absl::GetFlag(FLAGS_temperature));
  if (wanted("top_k")) request->set_top_k(absl::GetFlag(FLAGS_top_k));
  if (wanted("top_p")) request->set_top_p(absl::GetFlag(FLAGS_top_p));
  if (wanted("min_p")) request->set_min_p(absl::GetFlag(FLAGS_min_p));
  if (wanted("typical_p")) request->set_typical_p(absl::GetFlag(FLAGS_typical_p));
  if (wanted("repetition_penalty")) {
    request->set_repetition_penalty(absl::GetFlag(FLAGS_repetition_penalty));
  }
  if (wanted("frequency_penalty")) {
    request->set_frequency_penalty(absl::GetFlag(FLAGS_frequency_penalty));
  }
  if (wanted("presence_penalty")) {
    request->set_presence_penalty(absl::GetFlag(FLAGS_presence_penalty));
  }
  if (wanted("seed")) request->set_seed(absl::GetFlag(FLAGS_seed));
  request->set_logprobs(absl::GetFlag(FLAGS_logprobs));
  absl::StatusOr<StopFlags> stop = ReadStopFlags(argc, argv);
  if (!stop.ok()) return stop.status();
  for (const std::string& s : stop->stop) request->add_stop(s);
  for (int32_t id : stop->stop_token_ids) request->add_stop_token_ids(id);
  return absl::OkStatus();
}

}  // namespace tpserve
