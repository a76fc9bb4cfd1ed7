#include "server/coordinator/ngram_proposer.h"

#include <algorithm>

namespace tpserve::coordinator {

void ProposeNgram(absl::Span<const int32_t> prompt, absl::Span<const int32_t> generated,
                  const NgramOptions& options, int64_t k, std::vector<int32_t>* out) {
  out->clear();
  const auto p = static_cast<int64_t>(prompt.size());
  const int64_t length = p + static_cast<int64_t>(generated.size());
  auto at = [&](int64_t i) { return i < p ? prompt[i] : generated[i - p]; };
  if (k <= 0) return;
  for (int64_t n = std::min<int64_t>(options.max_n, length - 1); n >= options.min_n; --n) {
    // The suffix is [length - n, length); a match starts at `start` < length - n, and the
    // proposal is what followed it: [start + n, start + n + k), within the sequence.
    const int64_t earliest = std::max<int64_t>(0, length - n - options.window);
    for (int64_t start = length - n - 1; start >= earliest; --start) {
      int64_t i = 0;
      while (i < n && at(start + i) == at(length - n + i)) ++i;
      if (i < n) continue;
      const int64_t end = std::min(start + n + k, length);
      for (int64_t j = start + n; j < end; ++j) out->push_back(at(j));
      return;
    }
  }
}

}  // namespace tpserve::coordinator
