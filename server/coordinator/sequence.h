// Sequence: the scheduler's view of one request — its token history and how much of it the
// workers' KV cache holds. The coordinator is the single source of truth for both: a worker
// holds only KV memory, so a preempted (or world-lost) sequence is rebuilt by recomputing
// prompt + generated from position 0. Plain data, owned by the engine thread.
#ifndef TPSERVE_SERVER_COORDINATOR_SEQUENCE_H_
#define TPSERVE_SERVER_COORDINATOR_SEQUENCE_H_

#include <cstdint>
#include <vector>

namespace tpserve::coordinator {

struct Sequence {
  uint64_t id = 0;                   // unique per coordinator run; the workers' seq_id
  std::vector<int32_t> prompt;       // [prompt_len]
  std::vector<int32_t> generated;    // [generated_len] tokens streamed so far
  int64_t computed = 0;              // positions [0, computed) are in the KV cache
  std::vector<int32_t> block_table;  // physical KV blocks covering [0, computed + scheduled)
  // Prefix caching: the content keys of its leading full blocks known so far (BlockManager).
  std::vector<uint64_t> block_keys;
  int preemptions = 0;  // times its KV was dropped and recomputed
  // Speculative decoding: tokens proposed to follow `generated`, for the next step to verify
  // (positions [length, length + draft.size())); set before each Schedule, empty otherwise.
  std::vector<int32_t> draft;

  int64_t length() const { return static_cast<int64_t>(prompt.size() + generated.size()); }
  // Token at position `pos` of prompt + generated + draft.
  int32_t token_at(int64_t pos) const {
    const auto p = static_cast<int64_t>(prompt.size());
    const auto g = static_cast<int64_t>(generated.size());
    if (pos < p) return prompt[pos];
    return pos < p + g ? generated[pos - p] : draft[pos - p - g];
  }
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_SEQUENCE_H_
