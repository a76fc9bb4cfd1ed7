// `tpserve tokenize`: a line-oriented tokenizer for scripts and tests. Stateless.
#ifndef TPSERVE_SERVER_CLI_TOKENIZE_COMMAND_H_
#define TPSERVE_SERVER_CLI_TOKENIZE_COMMAND_H_

#include <istream>
#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace tpserve::cli {

struct TokenizeOptions {
  std::string model_path;   // GGUF file, or Hugging Face directory / tokenizer.json
  bool decode = false;      // lines are JSON arrays of ids; print JSON strings of text
  bool chat = false;        // lines are JSON lists of {role, content}; render the template first
  bool add_special = false; // add BOS when the model asks for it
};

// Reads `in` line by line and writes one JSON value per line to `out`: an array of token ids
// (encode), or a string (decode). A bad line is reported on `out` as {"error": "..."} and the
// rest go on; failing to load the tokenizer is the returned Status.
absl::Status RunTokenize(const TokenizeOptions& options, std::istream& in, std::ostream& out);

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_TOKENIZE_COMMAND_H_
