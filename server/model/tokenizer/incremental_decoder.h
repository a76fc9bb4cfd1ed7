// IncrementalDecoder: streaming detokenization of one sequence. Feed ids one at a time; each
// call returns only whole UTF-8 characters, holding back the bytes of a character that a
// later token may complete (byte-fallback <0xXX> tokens, byte-level pieces that split a
// character). The concatenation of every Feed and the final Flush equals
// Tokenizer::Decode(ids). Holds a reference to the Tokenizer, which must outlive it.
// Not thread-safe (one per sequence).
#ifndef TPSERVE_SERVER_MODEL_TOKENIZER_INCREMENTAL_DECODER_H_
#define TPSERVE_SERVER_MODEL_TOKENIZER_INCREMENTAL_DECODER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "server/model/tokenizer/tokenizer.h"

namespace tpserve::model {

class IncrementalDecoder {
 public:
  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // The text completed by `id` (possibly empty). An id outside the vocabulary is
  // InvalidArgument and changes nothing.
  absl::StatusOr<std::string> Feed(int32_t id);
  // The held-back bytes, an incomplete character becoming U+FFFD; the decoder is then empty.
  std::string Flush();
  // Bytes held back now (0-3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;   // bytes not yet emitted: an incomplete UTF-8 character
  bool at_start_ = true;  // no byte seen yet (for the SentencePiece leading space)
};

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_TOKENIZER_INCREMENTAL_DECODER_H_
