#include "server/grammar/token_constraint.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve::grammar {

TokenConstraint::TokenConstraint(std::shared_ptr<const CompiledGrammar> grammar,
                                 std::vector<int32_t> end_ids)
    : grammar_(std::move(grammar)), end_ids_(std::move(end_ids)), matcher_(grammar_->grammar()) {}

bool TokenConstraint::IsEnd(int32_t token) const {
  return std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end();
}

absl::Status TokenConstraint::Mask(absl::Time deadline, std::string* out) const {
  const std::shared_ptr<const TokenBitmask> mask = grammar_->Mask(matcher_, deadline);
  if (mask == nullptr) {
    return absl::ResourceExhaustedError(
        "structured_output: the grammar's token mask took past the step's budget");
  }
  const int32_t vocab = grammar_->trie().vocab_size();
  out->assign((static_cast<size_t>(vocab) + 7) / 8, '\0');
  for (size_t i = 0; i < out->size(); ++i) {
    (*out)[i] = static_cast<char>(((*mask)[i / 8] >> (8 * (i % 8))) & 0xFF);
  }
  if (matcher_.CanEnd()) {
    for (int32_t id : end_ids_) {
      if (id >= 0 && id < vocab) (*out)[id / 8] |= static_cast<char>(1 << (id % 8));
    }
  }
  return absl::OkStatus();
}

absl::Status TokenConstraint::Accept(int32_t token, std::string_view bytes) {
  if (ended_) return absl::InvalidArgumentError("the grammar has ended");
  if (IsEnd(token)) {
    if (!matcher_.CanEnd()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", token, " ends the output where the grammar cannot end"));
    }
    ended_ = true;
    return absl::OkStatus();
  }
  if (bytes.empty() || !matcher_.AcceptBytes(absl::string_view(bytes.data(), bytes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", token, " is not allowed by the grammar here"));
  }
  return absl::OkStatus();
}

}  // namespace tpserve::grammar
