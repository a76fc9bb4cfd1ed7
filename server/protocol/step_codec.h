// File: server/protocol/step_codec.h
//
// The one codec of a step between the coordinator and its workers (worker.proto), linked by
// both sides: the coordinator encodes each sequence's share of a Step and reads rank 0's
// sampled tokens back; a worker decodes a Step into an engine batch and what to sample, and
// encodes what it sampled. Each side checks what its peer sent while decoding it, so a bad
// message is an InvalidArgument naming the field and the limit, never a crash:
//   DecodeStep        (worker)       ids, positions and sampling fields, before any kernel;
//   ApplyStepMasks    (worker rank 0) the structured-output masks that follow a Step;
//   SampleDecodedStep (worker rank 0, and the in-process world of `tpserve generate`) draws;
//   CheckStepResult   (coordinator)  counts, sequence ids, token ids and top-n lengths.
// Stateless; thread-safe.
#ifndef TPSERVE_SERVER_PROTOCOL_STEP_CODEC_H_
#define TPSERVE_SERVER_PROTOCOL_STEP_CODEC_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/engine/sampler.h"
#include "server/engine/step_batch.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::protocol {

// Most proposed tokens a sequence of a Step may carry (StepSequence.draft_tokens).
inline constexpr uint32_t kMaxDraftTokens = 16;

// Most top-n alternatives a Step may ask per sampled token (SamplingParams.logprobs). The
// coordinator's own request limit sits at or below it.
inline constexpr uint32_t kMaxLogprobs = 100;

// SamplingParams both ways (stop_token_ids stay with the coordinator: they are not sent).
void SamplingToProto(const engine::SamplingParams& params, tpserve::v1::SamplingParams* out);
engine::SamplingParams SamplingFromProto(const tpserve::v1::SamplingParams& p);

// ---- Coordinator → worker.

struct StepSequenceSpec {
  uint64_t seq_id = 0;
  absl::Span<const int32_t> tokens;       // the new tokens
  int64_t start_pos = 0;                  // position of tokens[0]
  absl::Span<const int32_t> block_table;  // KV blocks covering [0, start_pos + tokens)
  bool sample = false;                    // sample after this step
  uint64_t sample_index = 0;              // index of that token among the generated ones
  int64_t draft_tokens = 0;               // the last of `tokens` that are proposals
};

// Appends `spec` to `step`. When sampling, carries `params` and — only if a penalty is on —
// the history (prompt then generated: the worker takes the last sample_index as generated).
void AddStepSequence(const StepSequenceSpec& spec, const engine::SamplingParams& params,
                     const engine::TokenHistory& history, tpserve::v1::Step* step);

// A sequence of a decoded Step that samples after it, in the Step's order (= the order of
// the logit rows). `history` views the Step's penalty_token_ids.
struct SampleSpec {
  uint64_t seq_id = 0;
  engine::SamplingParams params;
  engine::TokenHistory history;
  uint64_t sample_index = 0;
  absl::Span<const int32_t> draft;  // proposals to verify (views the Step); empty: none
  // Its StepMasks masks (ApplyStepMasks), one per position 0..draft.size(); none: every token.
  std::vector<absl::Span<const uint8_t>> allowed;
};

struct DecodedStep {
  engine::StepBatch batch;
  std::vector<SampleSpec> samples;
};

// `step` as an engine batch and its samples; `step` must outlive the result (the histories
// view it). InvalidArgument naming the sequence and field when a start position or block id
// does not fit the engine's int32, a seq_id repeats, or the sampling fields are out of their
// ranges (engine::ValidateSamplingParams; logprobs at most kMaxLogprobs and the vocabulary).
// The batch itself is checked against the model by engine::ValidateStep.
absl::StatusOr<DecodedStep> DecodeStep(const tpserve::v1::Step& step, int32_t vocab_size);

// Appends `seq_id`'s mask (ceil(vocab / 8) bytes, bit id % 8 of byte id / 8) at `position`
// (0: its next token; a verifying sequence's draw after that many proposals) to `masks`.
void AddSequenceMask(uint64_t seq_id, absl::string_view allowed_tokens,
                     tpserve::v1::StepMasks* masks, uint32_t position = 0);

// Points `decoded`'s samples at the masks of `masks`, which must outlive them. InvalidArgument
// naming the mask and field when `masks` is not of step `step_id`, a seq_id is not a sampling
// sequence of the step, a (seq_id, position) repeats, a position is past the sequence's
// proposals, a verifying sequence lacks a mask at one of its positions, or a mask is not
// ceil(vocab / 8) bytes or allows no token.
absl::Status ApplyStepMasks(const tpserve::v1::StepMasks& masks, uint64_t step_id,
                            int32_t vocab_size, DecodedStep* decoded);

// ---- Worker → coordinator.

// Appends rank 0's draw for sequence `seq_id` to `result`.
void AddSampledToken(uint64_t seq_id, const engine::SampleResult& sampled,
                     tpserve::v1::StepResult* result);

// Rank 0's draws: samples each of `decoded`'s sampling sequences from its rows of `logits`
// ([rows, vocab_size], in the Step's order: one per sample, 1 + draft for one that verifies
// proposals) and appends the tokens to `result` in that order (engine::VerifyDraft's, for a
// draft). InternalError when `logits` hold another number of rows.
absl::Status SampleDecodedStep(const DecodedStep& decoded, absl::Span<const float> logits,
                               int32_t vocab_size, engine::Sampler* sampler,
                               tpserve::v1::StepResult* result);

// OK when `result`, from rank `rank` of a world serving `vocab_size` tokens, answers `step`:
// rank 0 has one token per sampled sequence, in the Step's order, with its seq_id (for one
// with draft_tokens, its accepted proposals and then a draw that is not the next proposal);
// every id
// (chosen and top) is in [0, vocab_size); top ids and logprobs pair up, no more of them than
// the sequence asked for. Other ranks return no tokens. InvalidArgument naming what is wrong.
absl::Status CheckStepResult(const tpserve::v1::Step& step, const tpserve::v1::StepResult& result,
                             int rank, int32_t vocab_size);

// A checked SampledToken as a SampleResult.
engine::SampleResult FromSampledToken(const tpserve::v1::SampledToken& token);

}  // namespace tpserve::protocol

#endif  // TPSERVE_SERVER_PROTOCOL_STEP_CODEC_H_
