// FinishRule: when a request's stream ends, as one pure rule (vLLM v1's check_stop), applied
// by BatchEngine to every generated token (for the gRPC and HTTP APIs and `tpserve generate`
// alike) and by RequestValidator to the tokens a resumed stream already holds. In order:
// - the token itself ends it: EOS (unless the request ignores EOS), then a stop token id; its
//   text is not emitted;
// - else its text completes a stop string: STOP;
// - else, for a structured-output request, its grammar has ended (nothing may follow): STOP;
// - else the stream has reached max_tokens: LENGTH.
// Stateless functions; thread-safe.
#ifndef TPSERVE_SERVER_COORDINATOR_FINISH_RULE_H_
#define TPSERVE_SERVER_COORDINATOR_FINISH_RULE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "tpserve/v1/generate.pb.h"

namespace tpserve::coordinator {

// FINISH_REASON_EOS or _STOP when `token` itself ends the stream; _UNSPECIFIED otherwise (its
// text is then looked at, TextFinish).
tpserve::v1::FinishReason TokenFinish(int32_t token, int32_t eos_id, bool ignore_eos,
                                      absl::Span<const int32_t> stop_token_ids);

// After a token that did not end the stream by itself: FINISH_REASON_STOP when its text
// completed a stop string, _LENGTH when the stream now holds `generated` >= max_tokens
// tokens, _UNSPECIFIED when it goes on.
tpserve::v1::FinishReason TextFinish(bool stop_string_matched, int64_t generated,
                                     int64_t max_tokens, bool grammar_ended = false);

// The tokens that end a structured-output stream where its grammar may end: EOS (unless the
// request ignores it) and the stop token ids.
std::vector<int32_t> EndTokenIds(int32_t eos_id, bool ignore_eos,
                                 absl::Span<const int32_t> stop_token_ids);

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_FINISH_RULE_H_
