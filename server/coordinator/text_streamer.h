// TextStreamer: the streaming text stage of one request. Turns generated token ids into the
// text deltas sent to the client and ends the text before the first stop string, which may
// span several tokens. Owns an IncrementalDecoder (so only whole UTF-8 characters come out),
// the request's stop strings, and the decoded text not yet sent: between calls, only the
// longest suffix that is a proper prefix of some stop string, so fewer bytes than the longest
// stop string. Holds a reference to the Tokenizer, which must outlive it.
// Not thread-safe (one per request, driven by the coordinator's scheduler thread).
#ifndef TPSERVE_SERVER_COORDINATOR_TEXT_STREAMER_H_
#define TPSERVE_SERVER_COORDINATOR_TEXT_STREAMER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/model/tokenizer/incremental_decoder.h"
#include "server/model/tokenizer/tokenizer.h"

namespace tpserve::coordinator {

class TextStreamer {
 public:
  // `stop`: the request's stop strings, each non-empty and valid UTF-8 (the request validator
  // checks; a violation is a programmer error and CHECK-fails). `skip_special`: as
  // IncrementalDecoder (special tokens decode to nothing).
  TextStreamer(const model::Tokenizer& tokenizer, std::vector<std::string> stop,
               bool skip_special = true);

  struct Delta {
    std::string text;      // text safe to send now (may be empty); whole UTF-8 characters
    bool stopped = false;  // a stop string was completed: text holds everything before it;
                           // nothing more may be sent
  };

  // Feeds one generated token. Text that could still be the beginning of a stop string is
  // held back (only the longest suffix of the unsent text that is a proper prefix of some stop
  // string). When a stop string appears anywhere in the unsent text (it may span several
  // tokens; its earliest occurrence wins, whichever string it is), returns the text before it
  // with stopped = true. After a stop or Finish, FailedPrecondition. An id outside the
  // vocabulary is the decoder's InvalidArgument and changes nothing.
  absl::StatusOr<Delta> Feed(int32_t token_id);

  // End of generation without a stop string (length, EOS, stop token id, cancel): returns all
  // held-back text including the decoder's pending bytes (an incomplete UTF-8 character
  // becomes U+FFFD, as IncrementalDecoder::Flush does). Empty after stopped, and when called
  // again. Should that U+FFFD complete a stop string (only a stop string containing U+FFFD
  // can), the text is cut before it and stopped() becomes true.
  std::string Finish();

  bool stopped() const { return stopped_; }
  // Bytes of decoded text not yet sent (not counting the decoder's partial character).
  size_t held_back_bytes() const { return pending_.size(); }

 private:
  // Ends the stream at pending_[0, stop_at): returns that text and clears pending_.
  std::string StopAt(size_t stop_at);

  model::IncrementalDecoder decoder_;
  std::vector<std::string> stop_;
  std::string pending_;  // decoded, not yet sent; valid UTF-8
  bool stopped_ = false;
  bool finished_ = false;  // Finish was called
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_TEXT_STREAMER_H_
