// ProposeNgram: prompt-lookup decoding's proposal. The sequence's last n tokens (n from
// max_n down to min_n, the longest that matches first) are looked for earlier in its own
// prompt and output, the most recent match first; the tokens that followed that match are
// the proposal. Input-grounded text (a copy, an edit, code returned unchanged) repeats its
// input, so the proposals often are what the model would write anyway.
#ifndef TPSERVE_SERVER_COORDINATOR_NGRAM_PROPOSER_H_
#define TPSERVE_SERVER_COORDINATOR_NGRAM_PROPOSER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tpserve::coordinator {

struct NgramOptions {
  int min_n = 2;  // shortest suffix matched
  int max_n = 5;  // longest suffix matched
  // How far back a match is looked for, in tokens (bounds the work per step).
  int64_t window = 4096;
};

// Up to `k` tokens that followed the latest earlier occurrence of the sequence's suffix, into
// `out` (cleared; empty when nothing matches). The sequence is prompt ++ generated.
void ProposeNgram(absl::Span<const int32_t> prompt, absl::Span<const int32_t> generated,
                  const NgramOptions& options, int64_t k, std::vector<int32_t>* out);

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_NGRAM_PROPOSER_H_
