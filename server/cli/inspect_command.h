// `tpserve inspect`: a human-readable look at a model: its configuration, its weights by
// type, a prompt's tokens, and the prompt rendered through the chat template. Stateless.
#ifndef TPSERVE_SERVER_CLI_INSPECT_COMMAND_H_
#define TPSERVE_SERVER_CLI_INSPECT_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace tpserve::cli {

struct InspectOptions {
  std::string model_path;  // GGUF file or Hugging Face directory
  std::string prompt;      // tokenised and rendered as a user message
};

absl::Status RunInspect(const InspectOptions& options, std::ostream& out);

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_INSPECT_COMMAND_H_
