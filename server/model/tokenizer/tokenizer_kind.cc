#include "server/model/tokenizer/tokenizer_kind.h"

#include <array>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

namespace tpserve::model {
namespace {

// Every kind, in the order of the enum.
std::array<const TokenizerKindLoaders*, 2> AllKinds() {
  return {&ByteLevelLoaders(), &SentencePieceLoaders()};
}

}  // namespace

const TokenizerKindLoaders& LoadersOf(TokenizerKind kind) {
  const TokenizerKindLoaders& loaders = *AllKinds()[static_cast<size_t>(kind)];
  CHECK(loaders.kind == kind) << "AllKinds() is not in the order of TokenizerKind";
  return loaders;
}

absl::StatusOr<TokenizerKind> KindOfGgufModel(std::string_view model) {
  for (const TokenizerKindLoaders* loaders : AllKinds()) {
    if (loaders->gguf_model == model) return loaders->kind;
  }
  std::vector<std::string> supported;
  for (const TokenizerKindLoaders* loaders : AllKinds()) {
    supported.emplace_back(loaders->gguf_model);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported tokenizer.ggml.model '", std::string(model),
                   "' (supported: ", absl::StrJoin(supported, ", "), ")"));
}

TokenizerKind KindOfJson(const tokenizer_json::Pipeline& pipeline) {
  if (!pipeline.pre_types.empty() && pipeline.pre_types.back() == "ByteLevel") {
    return TokenizerKind::kByteLevel;
  }
  return TokenizerKind::kSentencePiece;
}

}  // namespace tpserve::model
