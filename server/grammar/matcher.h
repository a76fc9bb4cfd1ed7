// Matcher: where a generation stands in a compiled grammar (gbnf.h), advanced byte by byte.
//
// The state is a set of stacks (a pushdown automaton run on every parse at once, as
// llama.cpp's grammar sampler does): each stack's top is the byte range to match next, the
// frames below it where to go on after the rule it is in. A byte keeps the stacks whose top
// admits it; a rule reference on top is expanded into its alternatives; a finished
// alternative is popped; a reference in tail position pushes no return frame, so repetition
// never grows a stack. Identical stacks are kept once. The stacks are bounded (`max_stacks`);
// a grammar so ambiguous as to pass the bound at some byte rejects that byte.
#ifndef TPSERVE_SERVER_GRAMMAR_MATCHER_H_
#define TPSERVE_SERVER_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/grammar/gbnf.h"

namespace tpserve::grammar {

// A stack: element indices, the top (the next byte range to match) last.
using Stack = std::vector<int32_t>;

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar, int max_stacks = 4096);

  // Takes `byte` if some parse admits it (true), or leaves the state as it was (false).
  bool Accept(uint8_t byte);
  // Takes every byte of `bytes`, or none of them (false).
  bool AcceptBytes(absl::string_view bytes);
  // Whether the text so far is a whole sentence of the grammar (so it may end here).
  bool CanEnd() const { return can_end_; }
  // Whether no byte can follow (it can only end).
  bool Done() const { return stacks_.empty(); }

  const std::vector<Stack>& stacks() const { return stacks_; }
  const Grammar& grammar() const { return *grammar_; }
  // The stacks after `byte` from `stacks` (empty if none admits it); `can_end` set when one
  // of them has ended. For the token mask's walk of the vocabulary.
  bool Step(const std::vector<Stack>& stacks, uint8_t byte, std::vector<Stack>* next,
            bool* can_end) const;

 private:
  // Pushes onto `out` every stack that `stack` becomes once its top is a byte range (its
  // references expanded, its finished alternatives popped); an emptied one sets *can_end.
  void Expand(Stack stack, std::vector<Stack>* out, bool* can_end) const;

  std::shared_ptr<const Grammar> grammar_;
  int max_stacks_;
  std::vector<Stack> stacks_;
  bool can_end_ = false;
};

// Whether the whole of `text` is a sentence of `grammar`.
bool MatchesWhole(std::shared_ptr<const Grammar> grammar, absl::string_view text);

}  // namespace tpserve::grammar

#endif  // TPSERVE_SERVER_GRAMMAR_MATCHER_H_
