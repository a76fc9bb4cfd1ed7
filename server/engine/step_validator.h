// File: server/engine/step_validator.h
//
// ValidateStep: the one check of a StepBatch against what a rank's model can take, run once
// (LlamaModel::Forward) before any backend or kernel sees the batch, so that the backends
// only pack and every backend refuses the same batches with the same codes. Whatever a peer
// sends, a batch that passes is safe to run: every token id indexes the embedding, every
// position has a RoPE angle and a KV slot in one of the sequence's blocks, every block is
// in the cache, and the step fits the workspaces. Pure functions; thread-safe.
#ifndef TPSERVE_SERVER_ENGINE_STEP_VALIDATOR_H_
#define TPSERVE_SERVER_ENGINE_STEP_VALIDATOR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "server/engine/step_batch.h"

namespace tpserve::engine {

// What one rank's model can take in a step.
struct StepLimits {
  int64_t vocab_size = 0;        // token ids in [0, vocab_size)
  int64_t max_positions = 0;     // positions in [0, max_positions) (the RoPE table)
  int64_t kv_blocks = 0;         // KV block ids in [0, kv_blocks)
  int64_t kv_block_size = 0;     // tokens per KV block
  int64_t max_batch_tokens = 0;  // new tokens in one step, over all sequences
  int64_t max_logit_rows = 0;    // logit rows one step returns
};

// OK when `batch` is within `limits`: 1 to max_batch_tokens tokens in all; each sequence has
// tokens, all in the vocabulary, at positions [start_pos, start_pos + tokens) inside
// [0, max_positions); its block table covers those positions, has at most kv_blocks entries,
// every entry in [0, kv_blocks);
// at most max_logit_rows logit rows. Otherwise
// InvalidArgument naming the sequence, the field and the limit.
absl::Status ValidateStep(const StepBatch& batch, const StepLimits& limits);

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_STEP_VALIDATOR_H_
