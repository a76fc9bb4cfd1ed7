// TokenConstraint: one generation's place in its grammar, token by token — the mask of the
// tokens it may take next, and the check of the token it took. The coordinator keeps one per
// constrained request: its state is a function of the generated tokens alone, so preemption
// and a rebuilt world leave it as it is, and a resumed stream replays its tokens into it.
#ifndef TPSERVE_SERVER_GRAMMAR_TOKEN_CONSTRAINT_H_
#define TPSERVE_SERVER_GRAMMAR_TOKEN_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/grammar/compiled_grammar.h"

namespace tpserve::grammar {

class TokenConstraint {
 public:
  // `token_bytes(id)` as the tokenizer decodes it; `end_ids`: EOS and the request's stop
  // tokens, allowed where the grammar may end.
  TokenConstraint(std::shared_ptr<const CompiledGrammar> grammar, std::vector<int32_t> end_ids);

  // The tokens allowed next as a little-endian bitmask (bit id of byte id / 8), into `out`;
  // ResourceExhausted when computing it ran past `deadline`.
  absl::Status Mask(absl::Time deadline, std::string* out) const;
  // Takes `token` (its bytes): InvalidArgument when the grammar does not allow it. An end
  // token where the grammar may end ends it.
  absl::Status Accept(int32_t token, std::string_view bytes);
  // Whether nothing more may be generated: the grammar is whole and no byte can follow, or an
  // end token was taken.
  bool Ended() const { return ended_ || matcher_.Done(); }

 private:
  bool IsEnd(int32_t token) const;

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<int32_t> end_ids_;
  Matcher matcher_;
  bool ended_ = false;
};

}  // namespace tpserve::grammar

#endif  // TPSERVE_SERVER_GRAMMAR_TOKEN_CONSTRAINT_H_
