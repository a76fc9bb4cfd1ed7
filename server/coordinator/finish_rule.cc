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
                                     int64_t max_tokens) {
  if (stop_string_matched) return tpserve::v1::FINISH_REASON_STOP;
  if (generated >= max_tokens) return tpserve::v1::FINISH_REASON_LENGTH;
  return tpserve::v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace tpserve::coordinator
