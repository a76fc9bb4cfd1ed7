// tpserve: one binary, one subcommand per role.
//   tpserve inspect  --model PATH [--prompt TEXT]   model summary, tokens, chat template
//   tpserve tokenize --model PATH [--decode] [--chat] [--add_special]
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "glog/logging.h"
#include "server/cli/tokenize_command.h"

ABSL_FLAG(std::string, model, "", "Model: a GGUF file or a Hugging Face directory");
ABSL_FLAG(bool, decode, false, "tokenize: lines are JSON arrays of token ids; print text");
ABSL_FLAG(bool, chat, false, "tokenize: lines are JSON lists of {role, content} messages");
ABSL_FLAG(bool, add_special, false, "tokenize: add BOS when the model asks for it");

namespace {

constexpr char kUsage[] =
    "tpserve <command> [flags]\n"
    "commands:\n"
    "  tokenize --model PATH [--decode] [--chat] [--add_special]\n";

int Fail(const absl::Status& status) {
  std::cerr << "tpserve: " << status << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  if (args.size() != 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = args[1];
  if (command == "tokenize") {
    tpserve::cli::TokenizeOptions options;
    options.model_path = absl::GetFlag(FLAGS_model);
    options.decode = absl::GetFlag(FLAGS_decode);
    options.chat = absl::GetFlag(FLAGS_chat);
    options.add_special = absl::GetFlag(FLAGS_add_special);
    absl::Status status = tpserve::cli::RunTokenize(options, std::cin, std::cout);
    return status.ok() ? 0 : Fail(status);
  }
  std::cerr << "tpserve: unknown command '" << command << "'\n" << kUsage;
  return 2;
}
