// `tpserve tokenize`: a line-oriented tokenizer for scripts and tests. Stateless.
//
// Every input line is one JSON value and gives exactly one output line, one JSON value:
//   encode (default): a JSON string of text          -> a JSON array of token ids
//   --decode:         a JSON array of token ids      -> a JSON string of text
//   --chat:           a JSON array of {"role", "content"} objects, rendered by the model's
//                     chat template with the generation prompt -> a JSON array of token ids,
//                     or with --render the rendered prompt as a JSON string
// Text travels JSON-encoded so it may hold newlines; output escapes all non-ASCII (\uXXXX)
// so that no Unicode line separator appears. Empty input lines are skipped.
#ifndef TPSERVE_SERVER_CLI_TOKENIZE_COMMAND_H_
#define TPSERVE_SERVER_CLI_TOKENIZE_COMMAND_H_

#include <istream>
#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace tpserve::cli {

struct TokenizeOptions {
  std::string model_path;     // GGUF file, or Hugging Face directory / tokenizer.json
  bool decode = false;        // lines are JSON arrays of ids; print JSON strings of text
  bool chat = false;          // lines are JSON lists of {role, content}; render the template first
  bool add_special = false;   // add BOS/EOS when the model asks for it
  bool render = false;        // with chat: print the rendered prompt instead of its ids
  bool skip_special = false;  // with decode: leave special tokens out of the text
  std::string chat_template_path;  // with chat: a Jinja file to use instead of the model's
};

// Reads `in` line by line and writes one JSON value per line to `out`: an array of token ids
// (encode), or a string (decode). A bad line is reported on `out` as {"error": "..."} and the
// rest go on; failing to load the tokenizer (or, with chat, the template) is the returned
// Status.
absl::Status RunTokenize(const TokenizeOptions& options, std::istream& in, std::ostream& out);

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_TOKENIZE_COMMAND_H_
