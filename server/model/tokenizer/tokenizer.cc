#include "server/model/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::model {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerSpec spec) {
  if (spec.vocab == nullptr || spec.model == nullptr || spec.vocab->tokens.empty()) {
    return absl::InvalidArgumentError("tokenizer has no vocabulary or no model");
  }
  const auto n = static_cast<int32_t>(spec.vocab->tokens.size());
  auto in_range = [n](int32_t id) { return id >= 0 && id < n; };
  if (spec.bos_id >= n || spec.eos_id >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bos id ", spec.bos_id, " or eos id ", spec.eos_id, " is outside the vocabulary of ", n));
  }
  if (spec.add_bos && spec.bos_id < 0) {
    return absl::InvalidArgumentError("tokenizer adds BOS but has no BOS token");
  }
  if (spec.add_eos && spec.eos_id < 0) {
    return absl::InvalidArgumentError("tokenizer adds EOS but has no EOS token");
  }
  auto tok = std::unique_ptr<Tokenizer>(new Tokenizer());
  tok->token_bytes_.resize(n);
  tok->special_.assign(n, false);
  for (int32_t id = 0; id < n; ++id) tok->token_bytes_[id] = spec.model->TokenBytes(id);
  for (const AddedToken& t : spec.added_tokens) {
    if (!in_range(t.id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("added token '", t.content, "' has id ", t.id, " outside the vocabulary"));
    }
    tok->token_bytes_[t.id] = t.content;  // added tokens decode to their content
    tok->special_[t.id] = t.special;
  }
  ASSIGN_OR_RETURN(tok->added_, AddedTokenMatcher::Create(std::move(spec.added_tokens)));
  tok->vocab_ = std::move(spec.vocab);
  tok->model_ = std::move(spec.model);
  tok->bos_id_ = spec.bos_id;
  tok->eos_id_ = spec.eos_id;
  tok->add_bos_ = spec.add_bos;
  tok->add_eos_ = spec.add_eos;
  tok->chat_template_ = std::move(spec.chat_template);
  return tok;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool add_special,
                                                       absl::Span<const ByteRange> literal) const {
  size_t bad = 0;
  if (!IsValidUtf8(text, &bad)) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", bad));
  }
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal[i].begin > literal[i].end || literal[i].end > text.size() ||
        (i > 0 && literal[i].begin < literal[i - 1].end)) {
      return absl::InvalidArgumentError("literal ranges are not sorted, disjoint and in the text");
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_) ids.push_back(bos_id_);
  bool at_start = true;
  for (const TextSegment& segment : added_.Split(text, literal)) {
    if (segment.token_id >= 0) {
      ids.push_back(segment.token_id);
    } else {
      model_->EncodeSegment(segment.text, at_start, &ids);
    }
    at_start = false;
  }
  if (add_special && add_eos_) ids.push_back(eos_id_);
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (!IsValidId(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary of ", vocab_size()));
    }
    if (skip_special && special_[id]) continue;
    bytes += token_bytes_[id];
  }
  std::string text = Utf8Lossy(bytes);
  if (StripsLeadingSpace() && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return buffer.str();
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  if (IsDirectory(path)) {
    ASSIGN_OR_RETURN(std::string json, ReadFile(path + "/tokenizer.json"));
    absl::StatusOr<std::string> config = ReadFile(path + "/tokenizer_config.json");
    return FromJsonWithConfig(json, config.ok() ? *config : std::string());
  }
  if (absl::EndsWith(path, ".gguf")) {
    ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(path));
    return FromGguf(*gguf);
  }
  ASSIGN_OR_RETURN(std::string json, ReadFile(path));
  return FromJson(json);
}

}  // namespace tpserve::model
