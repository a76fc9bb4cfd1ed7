// The shape of a tpserve-bench load: length distributions ("fixed:N", "uniform:A:B") for
// prompts and outputs, and the prompts themselves (synthetic token ids of the drawn length, or
// lines of a file). Immutable after parsing; thread-safe.
#ifndef TPSERVE_CLIENTS_CPP_LOAD_SPEC_H_
#define TPSERVE_CLIENTS_CPP_LOAD_SPEC_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tpserve/v1/generate.pb.h"

namespace tpserve::client {

struct LengthDistribution {
  int64_t min = 0;
  int64_t max = 0;  // min == max: fixed
  // "fixed:N" or "uniform:A:B" (1 <= A <= B).
  static absl::StatusOr<LengthDistribution> Parse(const std::string& text);
  int64_t Draw(std::mt19937_64& rng) const;
};

// Builds request `index` of the run: the same (seed, index) always gives the same request.
class RequestFactory {
 public:
  // `prompts` empty: synthetic prompt_token_ids of prompt_len tokens from [first_id, last_id],
  // after `shared_prefix_len` ids that every request shares (a system prompt, for prefix
  // caching).
  RequestFactory(LengthDistribution prompt_len, LengthDistribution output_len,
                 std::vector<std::string> prompts, uint64_t seed, int32_t first_id, int32_t last_id,
                 tpserve::v1::GenerateRequest sampling, int64_t shared_prefix_len = 0);
  tpserve::v1::GenerateRequest Make(int64_t index) const;

 private:
  const LengthDistribution prompt_len_;
  const LengthDistribution output_len_;
  const std::vector<std::string> prompts_;
  const uint64_t seed_;
  const int32_t first_id_;
  const int32_t last_id_;
  const tpserve::v1::GenerateRequest sampling_;  // sampling fields copied into every request
  std::vector<int32_t> shared_prefix_;           // [shared_prefix_len], drawn from the seed
};

// Reads non-empty lines of `path` (\n-separated; "\\n" inside a line stands for a newline).
absl::StatusOr<std::vector<std::string>> ReadPrompts(const std::string& path);

}  // namespace tpserve::client

#endif  // TPSERVE_CLIENTS_CPP_LOAD_SPEC_H_
