// Byte-level BPE (GPT-2 style): pre-tokenize, map bytes to printable characters, merge by
// rank. Merged pieces are cached per piece string.
#include <array>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/common/status_macros.h"
#include "server/model/tokenizer/bpe.h"
#include "server/model/tokenizer/pretokenizer.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::model {
namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 onwards in byte order.
std::array<char32_t, 256> ByteToCodePoint() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

class ByteLevelBpe final : public BpeModel {
 public:
  ByteLevelBpe(std::shared_ptr<const Vocab> vocab, MergeTable merges,
               std::unique_ptr<PreTokenizer> pre, bool ignore_merges)
      : vocab_(std::move(vocab)),
        merges_(std::move(merges)),
        pre_(std::move(pre)),
        ignore_merges_(ignore_merges) {
    const auto map = ByteToCodePoint();
    for (int b = 0; b < 256; ++b) {
      AppendUtf8(map[b], &byte_chars_[b]);
      byte_ids_[b] = vocab_->Find(byte_chars_[b]);
      code_point_to_byte_.emplace(map[b], static_cast<uint8_t>(b));
    }
  }

  void EncodeSegment(std::string_view segment, bool at_text_start,
                     std::vector<int32_t>* ids) const override {
    std::vector<std::string_view> pieces;
    pre_->Split(segment, &pieces);
    for (std::string_view piece : pieces) EncodePiece(piece, ids);
  }

  std::string TokenBytes(int32_t id) const override {
    std::string out;
    const std::string& token = vocab_->tokens[id];
    for (size_t pos = 0; pos < token.size();) {
      const size_t len = Utf8SequenceLength(token, pos);
      if (len == 0) {  // not UTF-8: pass the byte through
        out.push_back(token[pos++]);
        continue;
      }
      const char32_t cp = DecodeUtf8At(token, pos, len);
      auto it = code_point_to_byte_.find(cp);
      if (it != code_point_to_byte_.end()) {
        out.push_back(static_cast<char>(it->second));
      } else {
        out.append(token, pos, len);  // outside the byte alphabet: kept as written
      }
      pos += len;
    }
    return out;
  }

  bool StripsLeadingSpace() const override { return false; }

 private:
  static constexpr size_t kMaxCacheEntries = 1 << 16;

  void EncodePiece(std::string_view piece, std::vector<int32_t>* ids) const {
    if (piece.size() == 1) {  // one byte never merges
      PushByte(static_cast<uint8_t>(piece[0]), ids);
      return;
    }
    {
      absl::ReaderMutexLock lock(&cache_mu_);
      auto it = cache_.find(absl::string_view(piece.data(), piece.size()));
      if (it != cache_.end()) {
        ids->insert(ids->end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> symbols;
    symbols.reserve(piece.size());
    bool whole = false;
    if (ignore_merges_) {
      std::string mapped;
      for (char c : piece) mapped += byte_chars_[static_cast<uint8_t>(c)];
      const int32_t id = vocab_->Find(mapped);
      if (id >= 0) {
        symbols.push_back(id);
        whole = true;
      }
    }
    if (!whole) {
      for (char c : piece) PushByte(static_cast<uint8_t>(c), &symbols);
      merges_.Merge(&symbols);
    }
    ids->insert(ids->end(), symbols.begin(), symbols.end());
    absl::MutexLock lock(&cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(piece), std::move(symbols));
  }

  // A byte missing from the vocabulary becomes unk, or is dropped when there is none (as
  // Hugging Face's BPE does).
  void PushByte(uint8_t b, std::vector<int32_t>* ids) const {
    const int32_t id = byte_ids_[b] >= 0 ? byte_ids_[b] : vocab_->unk_id;
    if (id >= 0) ids->push_back(id);
  }

  std::shared_ptr<const Vocab> vocab_;
  MergeTable merges_;
  std::unique_ptr<PreTokenizer> pre_;
  bool ignore_merges_;
  std::array<std::string, 256> byte_chars_;  // byte -> its character, UTF-8
  std::array<int32_t, 256> byte_ids_{};      // byte -> token id of its character, or -1
  absl::flat_hash_map<char32_t, uint8_t> code_point_to_byte_;

  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> NewByteLevelBpe(std::shared_ptr<const Vocab> vocab,
                                                          const std::vector<MergeRule>& merges,
                                                          PreTokenizerType pre_type,
                                                          bool ignore_merges) {
  ASSIGN_OR_RETURN(MergeTable table, MergeTable::Create(*vocab, merges));
  ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> pre, PreTokenizer::Create(pre_type));
  return std::make_unique<ByteLevelBpe>(std::move(vocab), std::move(table), std::move(pre),
                                        ignore_merges);
}

}  // namespace tpserve::model
