// SentencePiece-style BPE (Llama 2, Mistral): "▁" for spaces, an optional "▁" prefix,
// <0xXX> byte fallback; merges by rank (tokenizer.json) or by score (GGUF "llama").
#include <algorithm>
#include <array>
#include <optional>
#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/common/status_macros.h"
#include "server/model/tokenizer/bpe.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::model {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"

// `s` with every `from` replaced by `to`.
std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos);
  return out;
}

// The byte a "<0xXX>" token stands for, or -1.
int ByteOfToken(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

class SentencePieceBpe final : public BpeModel {
 public:
  SentencePieceBpe(std::shared_ptr<const Vocab> vocab, std::optional<MergeTable> merges,
                   std::vector<float> scores, const SentencePieceOptions& options)
      : vocab_(std::move(vocab)),
        merges_(std::move(merges)),
        scores_(std::move(scores)),
        options_(options) {
    for (int b = 0; b < 256; ++b) byte_ids_[b] = vocab_->Find(absl::StrFormat("<0x%02X>", b));
  }

  void EncodeSegment(std::string_view segment, bool at_text_start,
                     std::vector<int32_t>* ids) const override {
    if (segment.empty()) return;
    std::string text;
    using Prepend = SentencePieceOptions::Prepend;
    if (options_.prepend == Prepend::kAlways ||
        (options_.prepend == Prepend::kFirst && at_text_start)) {
      text = kSpace;
    }
    text += ReplaceAll(segment, " ", kSpace);
    if (merges_.has_value()) {
      EncodeByRank(text, ids);
    } else {
      EncodeByScore(text, ids);
    }
  }

  std::string TokenBytes(int32_t id) const override {
    const std::string& token = vocab_->tokens[id];
    if (options_.byte_fallback) {
      const int byte = ByteOfToken(token);
      if (byte >= 0) return std::string(1, static_cast<char>(byte));
    }
    return ReplaceAll(token, kSpace, " ");
  }

  bool StripsLeadingSpace() const override { return options_.strip_leading_space; }

 private:
  // Appends the ids for one character missing from the vocabulary: its bytes, else unk.
  void PushUnknown(std::string_view ch, bool* last_was_unk, std::vector<int32_t>* ids) const {
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) ids->push_back(byte_ids_[static_cast<uint8_t>(c)]);
        *last_was_unk = false;
        return;
      }
    }
    if (vocab_->unk_id < 0) return;
    if (options_.fuse_unk && *last_was_unk) return;
    ids->push_back(vocab_->unk_id);
    *last_was_unk = true;
  }

  void EncodeByRank(std::string_view text, std::vector<int32_t>* ids) const {
    std::vector<int32_t> symbols;
    symbols.reserve(text.size());
    bool last_was_unk = false;
    for (size_t pos = 0; pos < text.size();) {
      const size_t len = std::max<size_t>(1, Utf8SequenceLength(text, pos));
      const std::string_view ch = text.substr(pos, len);
      const int32_t id = vocab_->Find(ch);
      if (id >= 0) {
        symbols.push_back(id);
        last_was_unk = false;
      } else {
        PushUnknown(ch, &last_was_unk, &symbols);
      }
      pos += len;
    }
    merges_->Merge(&symbols);
    ids->insert(ids->end(), symbols.begin(), symbols.end());
  }

  // llama.cpp's llm_tokenizer_spm: repeatedly merge the adjacent pair whose joined text is
  // the highest-scoring vocabulary token (leftmost on ties).
  void EncodeByScore(std::string_view text, std::vector<int32_t>* ids) const {
    struct Symbol {
      size_t offset, len;
      int prev, next;
    };
    std::vector<Symbol> symbols;
    for (size_t pos = 0; pos < text.size();) {
      const size_t len = std::max<size_t>(1, Utf8SequenceLength(text, pos));
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({pos, len, index - 1, -1});
      if (index > 0) symbols[index - 1].next = index;
      pos += len;
    }
    struct Bigram {
      float score;
      int left, right;
      size_t len;
      bool operator<(const Bigram& o) const {
        return score != o.score ? score < o.score : left > o.left;
      }
    };
    std::priority_queue<Bigram> queue;
    auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const std::string_view joined =
          text.substr(symbols[left].offset, symbols[left].len + symbols[right].len);
      const int32_t id = vocab_->Find(joined);
      if (id < 0 || static_cast<size_t>(id) >= scores_.size()) return;
      queue.push({scores_[id], left, right, joined.size()});
    };
    for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& left = symbols[b.left];
      Symbol& right = symbols[b.right];
      if (left.len == 0 || right.len == 0 || left.len + right.len != b.len) continue;
      left.len += right.len;
      right.len = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = b.left;
      try_add(left.prev, b.left);
      try_add(b.left, left.next);
    }
    bool last_was_unk = false;
    for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
      const std::string_view piece = text.substr(symbols[i].offset, symbols[i].len);
      const int32_t id = vocab_->Find(piece);
      if (id >= 0) {
        ids->push_back(id);
        last_was_unk = false;
      } else {
        PushUnknown(piece, &last_was_unk, ids);
      }
    }
  }

  std::shared_ptr<const Vocab> vocab_;
  std::optional<MergeTable> merges_;  // rank mode when set
  std::vector<float> scores_;         // score mode: [vocab_size]
  SentencePieceOptions options_;
  std::array<int32_t, 256> byte_ids_{};  // byte -> id of its <0xXX> token, or -1
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> NewSentencePieceBpeWithMerges(
    std::shared_ptr<const Vocab> vocab, const std::vector<MergeRule>& merges,
    const SentencePieceOptions& options) {
  ASSIGN_OR_RETURN(MergeTable table, MergeTable::Create(*vocab, merges));
  return std::make_unique<SentencePieceBpe>(std::move(vocab), std::move(table),
                                            std::vector<float>(), options);
}

absl::StatusOr<std::unique_ptr<BpeModel>> NewSentencePieceBpeWithScores(
    std::shared_ptr<const Vocab> vocab, std::vector<float> scores,
    const SentencePieceOptions& options) {
  if (scores.size() != vocab->tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("SentencePiece model has ", scores.size(),
                                                   " scores for ", vocab->tokens.size(),
                                                   " tokens"));
  }
  return std::make_unique<SentencePieceBpe>(std::move(vocab), std::nullopt, std::move(scores),
                                            options);
}

}  // namespace tpserve::model
