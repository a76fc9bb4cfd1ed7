// StepBatch: the host-side description of one forward step, the shape of a worker step: a
// batch mixing prefill chunks and single decode tokens of different sequences, each with its
// start position and KV block table. Plain data.
#ifndef TPSERVE_SERVER_ENGINE_STEP_BATCH_H_
#define TPSERVE_SERVER_ENGINE_STEP_BATCH_H_

#include <cstdint>
#include <vector>

namespace tpserve::engine {

struct StepSequence {
  std::vector<int32_t> tokens;       // the new tokens: a prefill chunk or one decode token
  int32_t start_pos = 0;             // position of tokens[0] in the sequence
  std::vector<int32_t> block_table;  // physical KV blocks covering [0, start_pos + tokens)
  bool want_logits = true;           // return logits of its last new token
  bool all_logits = false;           // return logits of every new token (prompt logprobs)

  int64_t num_logit_rows() const {
    if (all_logits) return static_cast<int64_t>(tokens.size());
    return want_logits && !tokens.empty() ? 1 : 0;
  }
};

struct StepBatch {
  std::vector<StepSequence> sequences;

  int64_t num_tokens() const {
    int64_t n = 0;
    for (const StepSequence& s : sequences) n += static_cast<int64_t>(s.tokens.size());
    return n;
  }
  int64_t num_logit_rows() const {
    int64_t n = 0;
    for (const StepSequence& s : sequences) n += s.num_logit_rows();
    return n;
  }
};

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_STEP_BATCH_H_
