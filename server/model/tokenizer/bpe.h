// The BPE models behind Tokenizer: a vocabulary, a rank-ordered merge table, and the
// BpeModel interface that turns one stretch of text (between added tokens) into ids and one
// id back into its bytes. Two implementations, one file each: byte-level BPE (GPT-2, Llama 3,
// SmolLM2: bpe_byte_level.cc) and SentencePiece-style BPE (Llama 2, Mistral:
// bpe_sentencepiece.cc). All are immutable after creation and thread-safe.
#ifndef TPSERVE_SERVER_MODEL_TOKENIZER_BPE_H_
#define TPSERVE_SERVER_MODEL_TOKENIZER_BPE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/model/tokenizer/pretokenizer.h"

namespace tpserve::model {

// Token strings as the model file spells them, and their inverse.
struct Vocab {
  std::vector<std::string> tokens;                // [vocab_size]
  absl::flat_hash_map<std::string, int32_t> ids;  // token string -> id
  int32_t unk_id = -1;                            // -1: none

  // Builds `ids` from `tokens`; a duplicate token string keeps its first id.
  static std::shared_ptr<Vocab> FromTokens(std::vector<std::string> tokens, int32_t unk_id);
  int32_t Find(std::string_view token) const {
    // Debian's Abseil has its own string_view type.
    auto it = ids.find(absl::string_view(token.data(), token.size()));
    return it == ids.end() ? -1 : it->second;
  }
};

// One merge rule "left right", in rank order (index 0 merges first).
using MergeRule = std::pair<std::string, std::string>;

// Parses "left right" merge lines (split at the first space, as Hugging Face does).
absl::StatusOr<std::vector<MergeRule>> ParseMergeLines(const std::vector<std::string>& lines);

// Pairs of ids and what they merge into, by rank. Merge applies them to a symbol sequence
// lowest rank first, leftmost first among equal ranks (Hugging Face's word merge order).
class MergeTable {
 public:
  // InvalidArgument when a rule's left, right or joined string is not in `vocab`.
  static absl::StatusOr<MergeTable> Create(const Vocab& vocab, const std::vector<MergeRule>& rules);

  // Rewrites `symbols` (token ids) in place into its merged form.
  void Merge(std::vector<int32_t>* symbols) const;
  size_t size() const { return pairs_.size(); }

 private:
  struct Target {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Target* Find(int32_t left, int32_t right) const {
    auto it = pairs_.find(Key(left, right));
    return it == pairs_.end() ? nullptr : &it->second;
  }
  absl::flat_hash_map<uint64_t, Target> pairs_;
};

class BpeModel {
 public:
  virtual ~BpeModel() = default;
  // Appends the ids of `segment` (valid UTF-8 text between added tokens). `at_text_start`:
  // nothing (no added token) precedes it in the text being encoded.
  virtual void EncodeSegment(std::string_view segment, bool at_text_start,
                             std::vector<int32_t>* ids) const = 0;
  // The bytes a vocabulary token stands for when decoding (not UTF-8 checked).
  virtual std::string TokenBytes(int32_t id) const = 0;
  // Whether decoding drops one leading space from the decoded text (SentencePiece's prefix).
  virtual bool StripsLeadingSpace() const = 0;
};

// Byte-level BPE: each byte of a pre-tokenized piece maps to a printable character (GPT-2's
// bytes_to_unicode), then merges by rank. `pre_type` picks the PreTokenizer. With
// `ignore_merges` a piece that is itself a vocabulary token is emitted whole (Llama 3).
absl::StatusOr<std::unique_ptr<BpeModel>> NewByteLevelBpe(std::shared_ptr<const Vocab> vocab,
                                                          const std::vector<MergeRule>& merges,
                                                          PreTokenizerType pre_type,
                                                          bool ignore_merges);

// SentencePiece-style BPE: spaces become U+2581 "▁", a "▁" may be prepended, characters
// missing from the vocabulary fall back to <0xXX> byte tokens.
struct SentencePieceOptions {
  enum class Prepend { kNever, kFirst, kAlways };
  // kAlways: before every segment (HF Prepend normalizer, llama.cpp add_space_prefix);
  // kFirst: only before a segment at the start of the text (HF Metaspace "first").
  Prepend prepend = Prepend::kAlways;
  bool byte_fallback = true;
  bool fuse_unk = false;            // consecutive unknown characters give one unk
  bool strip_leading_space = true;  // decoder drops one leading space
};

// Merges by rank (Hugging Face tokenizer.json "BPE" model with byte_fallback).
absl::StatusOr<std::unique_ptr<BpeModel>> NewSentencePieceBpeWithMerges(
    std::shared_ptr<const Vocab> vocab, const std::vector<MergeRule>& merges,
    const SentencePieceOptions& options);

// Merges by score: the adjacent pair whose joined string is the vocabulary token of highest
// score merges first (GGUF tokenizer.ggml.model "llama", as llama.cpp and SentencePiece do).
// `scores` is [vocab_size].
absl::StatusOr<std::unique_ptr<BpeModel>> NewSentencePieceBpeWithScores(
    std::shared_ptr<const Vocab> vocab, std::vector<float> scores,
    const SentencePieceOptions& options);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_TOKENIZER_BPE_H_
