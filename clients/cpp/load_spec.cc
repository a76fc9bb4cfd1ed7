#include "clients/cpp/load_spec.h"

#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace tpserve::client {

absl::StatusOr<LengthDistribution> LengthDistribution::Parse(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  LengthDistribution d;
  bool ok = false;
  if (parts.size() == 2 && parts[0] == "fixed") {
    ok = absl::SimpleAtoi(parts[1], &d.min);
    d.max = d.min;
  } else if (parts.size() == 3 && parts[0] == "uniform") {
    ok = absl::SimpleAtoi(parts[1], &d.min) && absl::SimpleAtoi(parts[2], &d.max);
  }
  if (!ok || d.min < 1 || d.max < d.min) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': want fixed:N or uniform:A:B with 1 <= A <= B"));
  }
  return d;
}

int64_t LengthDistribution::Draw(std::mt19937_64& rng) const {
  if (min == max) return min;
  return std::uniform_int_distribution<int64_t>(min, max)(rng);
}

RequestFactory::RequestFactory(LengthDistribution prompt_len, LengthDistribution output_len,
                               std::vector<std::string> prompts, uint64_t seed, int32_t first_id,
                               int32_t last_id, tpserve::v1::GenerateRequest sampling,
                               int64_t shared_prefix_len)
    : prompt_len_(prompt_len),
      output_len_(output_len),
      prompts_(std::move(prompts)),
      seed_(seed),
      first_id_(first_id),
      last_id_(last_id),
      sampling_(std::move(sampling)) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(first_id_, last_id_);
  for (int64_t i = 0; i < shared_prefix_len; ++i) shared_prefix_.push_back(id(rng));
}

tpserve::v1::GenerateRequest RequestFactory::Make(int64_t index) const {
  std::seed_seq seq{seed_, static_cast<uint64_t>(index)};
  std::mt19937_64 rng(seq);
  tpserve::v1::GenerateRequest r = sampling_;
  r.set_max_tokens(static_cast<uint32_t>(output_len_.Draw(rng)));
  r.set_request_id(absl::StrCat("bench-", index));
  if (!prompts_.empty()) {
    r.set_prompt(prompts_[static_cast<size_t>(index) % prompts_.size()]);
  } else {
    std::uniform_int_distribution<int32_t> id(first_id_, last_id_);
    r.mutable_prompt_token_ids()->Add(shared_prefix_.begin(), shared_prefix_.end());
    const int64_t n = prompt_len_.Draw(rng);
    for (int64_t i = 0; i < n; ++i) r.add_prompt_token_ids(id(rng));
  }
  return r;
}

absl::StatusOr<std::vector<std::string>> ReadPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read prompts from ", path));
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) prompts.push_back(absl::StrReplaceAll(line, {{"\\n", "\n"}}));
  }
  if (prompts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " has no prompts"));
  return prompts;
}

}  // namespace tpserve::client
