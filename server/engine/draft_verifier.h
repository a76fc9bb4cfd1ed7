// VerifyDraft: speculative decoding's acceptance rule, exact by construction. A target step
// computed a sequence's last token and its K proposed tokens at once, giving K + 1 rows of
// logits: row j is the distribution after the first j proposals. Each row is drawn as plain
// decoding would draw that position (the same sample index, the same penalty history with
// the proposals before it taken as generated, the same draw and grammar mask), and proposals are
// accepted while they equal the draw. The first draw that differs ends it; when all K are accepted,
// row K gives one more. So the tokens returned are exactly those plain decoding would produce, one
// step at a time, greedy or seeded alike (the kernels being batch- and chunking-invariant).
// Not thread-safe (it borrows the caller's Sampler).
#ifndef TPSERVE_SERVER_ENGINE_DRAFT_VERIFIER_H_
#define TPSERVE_SERVER_ENGINE_DRAFT_VERIFIER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "server/engine/sampler.h"

namespace tpserve::engine {

// `logits`: [draft.size() + 1, vocab]. `history` and `index` are those of the draw at row 0
// (plain decoding's next token). `allowed`: a structured-output mask per row (as
// Sampler::Sample takes one), draft.size() + 1 of them, or none. Appends to `out` the accepted
// proposals, then the draw that ended the verification: between 1 and draft.size() + 1 results.
// `scratch` holds the extended history (reused across calls).
void VerifyDraft(Sampler* sampler, absl::Span<const float> logits, int64_t vocab,
                 const SamplingParams& params, const TokenHistory& history, uint64_t index,
                 absl::Span<const int32_t> draft,
                 absl::Span<const absl::Span<const uint8_t>> allowed, std::vector<int32_t>* scratch,
                 std::vector<SampleResult>* out);

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_DRAFT_VERIFIER_H_
