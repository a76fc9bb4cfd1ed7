#include "server/engine/step_validator.h"

#include "absl/strings/str_cat.h"

namespace tpserve::engine {
namespace {

absl::Status CheckSequence(size_t s, const StepSequence& seq, const StepLimits& limits) {
  const auto t = static_cast<int64_t>(seq.tokens.size());
  if (t == 0) return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": no tokens"));
  const int64_t end = static_cast<int64_t>(seq.start_pos) + t;
  if (seq.start_pos < 0 || end > limits.max_positions) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": positions [", seq.start_pos,
                                                   ", ", end, ") leave the context [0, ",
                                                   limits.max_positions, ")"));
  }
  for (int32_t id : seq.tokens) {
    if (id < 0 || id >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": token id ", id,
                                                     " is outside the vocabulary [0, ",
                                                     limits.vocab_size, ")"));
    }
  }
  const int64_t bs = limits.kv_block_size;
  const int64_t needed = (end + bs - 1) / bs;
  const auto blocks = static_cast<int64_t>(seq.block_table.size());
  if (blocks > limits.kv_blocks) {  // the backends allocate sequences x the longest table
    return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": block table has ", blocks,
                                                   " blocks, more than the cache's ",
                                                   limits.kv_blocks));
  }
  if (blocks < needed) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": block table has ", blocks,
                                                   " blocks; positions up to ", end, " need ",
                                                   needed));
  }
  // Blocks past those needed are never read, but each must still be a block of the cache.
  for (int32_t block : seq.block_table) {
    if (block < 0 || block >= limits.kv_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": KV block ", block,
                                                     " is outside [0, ", limits.kv_blocks, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateStep(const StepBatch& batch, const StepLimits& limits) {
  int64_t tokens = 0;
  int64_t rows = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const StepSequence& seq = batch.sequences[s];
    if (absl::Status st = CheckSequence(s, seq, limits); !st.ok()) return st;
    tokens += static_cast<int64_t>(seq.tokens.size());
    rows += seq.num_logit_rows();
  }
  if (tokens < 1 || tokens > limits.max_batch_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step holds 1 to ", limits.max_batch_tokens, " tokens, got ", tokens));
  }
  if (rows > limits.max_logit_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step returns at most ", limits.max_logit_rows, " logit rows, got ", rows));
  }
  return absl::OkStatus();
}

}  // namespace tpserve::engine
