#include "server/coordinator/finish_rule.h"

#include <algorithm>

namespace tpserve::coordinator {

tpserve::v1::FinishReason TokenFinish(int32_t token, int32_t eos_id, bool ignore_eos,
                                      absl::Span<const int32_t> stop_token_ids) {
  if (!ignore_eos && token == eos_id) return tpserve::v1::FINISH_REASON_EOS;
  if (std::find(stop_token_ids.begin(), stop_token_ids.end(), token) != stop_token_ids.end()) {
    return tpserve::v1::FINISH_REASON_STOP;
  }
  return tpserve::v1::FINISH_REASON_UNSPECIFIED;
}

tpserve::v1::FinishReason TextFinish(bool stop_string_matched, int64_t generated,
                                     int64_t max_tokens, bool grammar_ended) {
  if (stop_string_matched || grammar_ended) return tpserve::v1::FINISH_REASON_STOP;
  if (generated >= max_tokens) return tpserve::v1::FINISH_REASON_LENGTH;
  return tpserve::v1::FINISH_REASON_UNSPECIFIED;
}

std::vector<int32_t> EndTokenIds(int32_t eos_id, bool ignore_eos,
                                 absl::Span<const int32_t> stop_token_ids) {
  std::vector<int32_t> ids(stop_token_ids.begin(), stop_token_ids.end());
  if (!ignore_eos && eos_id >= 0) ids.push_back(eos_id);
  return ids;
}

}  // namespace tpserve::coordinator
