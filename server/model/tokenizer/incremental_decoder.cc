#include "server/model/tokenizer/incremental_decoder.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::model {

absl::StatusOr<std::string> IncrementalDecoder::Feed(int32_t id) {
  if (!tokenizer_.IsValidId(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token id ", id, " is outside the vocabulary of ", tokenizer_.vocab_size()));
  }
  if (skip_special_ && tokenizer_.IsSpecial(id)) return std::string();
  std::string_view bytes = tokenizer_.TokenBytes(id);
  if (at_start_ && !bytes.empty()) {
    at_start_ = false;
    if (tokenizer_.StripsLeadingSpace() && bytes[0] == ' ') bytes.remove_prefix(1);
  }
  pending_.append(bytes.data(), bytes.size());
  const size_t ready = Utf8CompletePrefixLength(pending_);
  std::string out = Utf8Lossy(std::string_view{pending_}.substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string IncrementalDecoder::Flush() {
  std::string out = Utf8Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace tpserve::model
