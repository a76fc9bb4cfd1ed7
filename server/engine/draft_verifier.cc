#include "server/engine/draft_verifier.h"

namespace tpserve::engine {

void VerifyDraft(Sampler* sampler, absl::Span<const float> logits, int64_t vocab,
                 const SamplingParams& params, const TokenHistory& history, uint64_t index,
                 absl::Span<const int32_t> draft,
                 absl::Span<const absl::Span<const uint8_t>> allowed, std::vector<int32_t>* scratch,
                 std::vector<SampleResult>* out) {
  const auto rows = static_cast<size_t>(vocab);
  // The penalties see the accepted proposals as generated tokens: generated ++ draft[0, j).
  scratch->assign(history.generated.begin(), history.generated.end());
  for (size_t j = 0; j <= draft.size(); ++j) {
    const TokenHistory seen{history.prompt, *scratch};
    SampleResult drawn =
        sampler->Sample(logits.subspan(j * rows, rows), params, seen, index + j,
                        allowed.empty() ? absl::Span<const uint8_t>() : allowed[j]);
    const bool accepted = j < draft.size() && drawn.token_id == draft[j];
    out->push_back(std::move(drawn));
    if (!accepted) return;
    scratch->push_back(draft[j]);
  }
}

}  // namespace tpserve::engine
