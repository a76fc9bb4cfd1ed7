#include "server/coordinator/text_streamer.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "glog/logging.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::coordinator {

namespace {

// The start of the earliest occurrence in `text` of any of `stops`, or npos. `text` is the
// unsent text, shorter than the longest stop string plus one token's text, so a plain search
// per stop string (at most 16, short) costs little.
size_t FindEarliestStop(std::string_view text, const std::vector<std::string>& stops) {
  size_t earliest = std::string_view::npos;
  for (const std::string& s : stops) {
    const size_t at = text.find(s);
    if (at < earliest) earliest = at;
  }
  return earliest;
}

// The length of the longest suffix of `text` that is a proper prefix of some stop string.
// Both are valid UTF-8 and the suffix starts with a stop string's first byte, a lead byte,
// so the cut before it falls between whole characters.
size_t HeldSuffixLength(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    const std::string_view stop = s;
    for (size_t n = std::min(text.size(), stop.size() - 1); n > best; --n) {
      if (text.substr(text.size() - n) == stop.substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

}  // namespace

TextStreamer::TextStreamer(const model::Tokenizer& tokenizer, std::vector<std::string> stop,
                           bool skip_special)
    : decoder_(tokenizer, skip_special), stop_(std::move(stop)) {
  for (const std::string& s : stop_) {
    CHECK(!s.empty()) << "empty stop string";
    CHECK(model::IsValidUtf8(s)) << "stop string is not valid UTF-8";
  }
}

absl::StatusOr<TextStreamer::Delta> TextStreamer::Feed(int32_t token_id) {
  if (stopped_) return absl::FailedPreconditionError("token fed after a stop string");
  if (finished_) return absl::FailedPreconditionError("token fed after Finish");
  absl::StatusOr<std::string> text = decoder_.Feed(token_id);
  if (!text.ok()) return text.status();
  Delta delta;
  // Nothing new: pending_ already holds no stop string and only a stop-string prefix.
  if (text->empty()) return delta;
  pending_ += *text;
  const size_t stop_at = FindEarliestStop(pending_, stop_);
  if (stop_at != std::string::npos) {
    delta.text = StopAt(stop_at);
    delta.stopped = true;
    return delta;
  }
  const size_t send = pending_.size() - HeldSuffixLength(pending_, stop_);
  delta.text = pending_.substr(0, send);
  pending_.erase(0, send);
  return delta;
}

std::string TextStreamer::Finish() {
  if (stopped_ || finished_) return std::string();
  finished_ = true;
  pending_ += decoder_.Flush();
  const size_t stop_at = FindEarliestStop(pending_, stop_);
  if (stop_at != std::string::npos) return StopAt(stop_at);
  return std::exchange(pending_, std::string());
}

std::string TextStreamer::StopAt(size_t stop_at) {
  stopped_ = true;
  pending_.resize(stop_at);
  return std::exchange(pending_, std::string());
}

}  // namespace tpserve::coordinator
