// TokenMask: which tokens a generation may take next, from its grammar state.
//
// The vocabulary's byte strings (the tokenizer's byte-level view of every token: the ground
// truth, SentencePiece or byte-level BPE alike) sit in a trie laid out in preorder, each node
// knowing where its subtree ends. The mask walks it once from the matcher's stacks: a node's
// byte advances its parent's stacks; where no stack admits it, its whole subtree is skipped.
// A token is allowed when all of its bytes are admitted; the end-of-sequence token when the
// grammar may end. Special tokens (and empty ones) are never allowed by the grammar.
#ifndef TPSERVE_SERVER_GRAMMAR_TOKEN_MASK_H_
#define TPSERVE_SERVER_GRAMMAR_TOKEN_MASK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/grammar/matcher.h"

namespace tpserve::grammar {

// Bit `id` set: token `id` allowed. [ceil(vocab_size / 64)]
using TokenBitmask = std::vector<uint64_t>;

inline bool Allowed(const TokenBitmask& mask, int32_t id) {
  return (mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
}

class TokenTrie {
 public:
  // `token_bytes[id]` for every id; `never[id]` for those the grammar never allows (special
  // tokens). `eos_id` (or -1) is allowed where the grammar may end.
  TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& never,
            int32_t eos_id);

  int32_t vocab_size() const { return vocab_size_; }
  int32_t eos_id() const { return eos_id_; }
  size_t nodes() const { return byte_.size(); }

  // The mask for `matcher`'s state, into `mask` (resized); false (the mask unfinished) when
  // the walk runs past `deadline`.
  bool Mask(const Matcher& matcher, TokenBitmask* mask,
            absl::Time deadline = absl::InfiniteFuture()) const;

 private:
  int32_t vocab_size_ = 0;
  int32_t eos_id_ = -1;
  // Nodes in preorder; node 0 is the root (no byte).
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<int32_t> subtree_end_;   // one past the node's last descendant
  std::vector<int32_t> tokens_begin_;  // the node's tokens: tokens_[begin, begin of next node)
  std::vector<int32_t> tokens_;
};

}  // namespace tpserve::grammar

#endif  // TPSERVE_SERVER_GRAMMAR_TOKEN_MASK_H_
