// tpserve-cli: the command-line client of a tpserve server.
//   generate PROMPT   stream the answer (--json: one JSON object per streamed message; the
//                     first also has the seed the server reports)
//   chat              interactive; keeps the conversation; Ctrl-C cancels the current answer
//   tokenize TEXT     token ids and pieces
//   info              the served model, world and limits
//   health            grpc.health.v1: exits 0 when SERVING
// A stream that breaks (UNAVAILABLE: a restarting or draining server, a reset connection) is
// resent up to --max_resumes times with what arrived so far and continues where it broke;
// each resend is one line on stderr. Exit status: 0 on success; otherwise the gRPC status code
// (1..16) with "CODE: message" on stderr, and 64 for a usage error.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "clients/cpp/generation_client.h"
#include "clients/cpp/security_flags.h"
#include "nlohmann/json.hpp"
#include "server/common/flags/flag_names.h"
#include "server/common/flags/sampling_flags.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "tpserve server, HOST:PORT");
ABSL_FLAG(double, timeout_s, 0, "deadline of each call in seconds (0: none)");
ABSL_FLAG(bool, json, false, "generate: print one JSON object per streamed message");
ABSL_FLAG(bool, chat_template, false, "generate: send PROMPT as a user chat message");
ABSL_FLAG(std::string, system, "", "chat/generate --chat_template: a system message first");
ABSL_FLAG(uint32_t, max_tokens, 256, "largest number of tokens to generate");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past the end-of-sequence token");
ABSL_FLAG(std::string, request_id, "", "the request's id");
ABSL_FLAG(bool, add_special_tokens, false, "tokenize: add BOS when the model asks for it");
ABSL_FLAG(int32_t, max_resumes, 8,
          "generate/chat: resends of a stream that broke (UNAVAILABLE, a reset), continuing "
          "where it broke; 0: none");

namespace {

using tpserve::client::Describe;
using tpserve::client::GenerationClient;
using tpserve::v1::GenerateRequest;
using tpserve::v1::GenerateResponse;
using json = nlohmann::json;

constexpr int kUsageError = 64;
constexpr char kUsage[] =
    "tpserve-cli [--server HOST:PORT] [security flags] <command>\n"
    "  generate PROMPT [--chat_template] [--json] [sampling flags]\n"
    "  chat [--system TEXT] [sampling flags]   (Ctrl-C cancels the current answer)\n"
    "  tokenize TEXT [--add_special_tokens]\n"
    "  info\n"
    "  health\n"
    "sampling flags: --max_tokens --temperature --top_k --top_p --min_p --typical_p\n"
    "  --repetition_penalty --frequency_penalty --presence_penalty --seed --stop\n"
    "  --stop_token_ids --ignore_eos\n"
    "  --logprobs; --temperature to --seed are sent only when given, and the server's\n"
    "  defaults apply without them (temperature 1, a seed it draws)\n"
    "  --max_resumes N: resends of a broken stream, continuing it (default 8; 0: none)\n"
    "security flags: --tls_ca_file F [--tls_cert_file F --tls_key_file F] (TLS, mutual TLS)\n"
    "  --api_key KEY (default: $TPSERVE_API_KEY)\n"
    "flags may be written with dashes or underscores (--max-tokens = --max_tokens)\n";

// The sampling, logprobs and stop fields the command line gives (only the sampling flags
// named on it: the server's defaults hold for the others), read in Main.
absl::StatusOr<GenerateRequest>& SamplingFields() {
  static auto* fields = new absl::StatusOr<GenerateRequest>();
  return *fields;
}

// The sampling fields of GenerateRequest from the flags; optional ones only when given.
absl::Status FillSampling(GenerateRequest* r) {
  if (!SamplingFields().ok()) return SamplingFields().status();
  r->MergeFrom(*SamplingFields());
  r->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  r->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  r->set_request_id(absl::GetFlag(FLAGS_request_id));
  return absl::OkStatus();
}

const char* FinishName(tpserve::v1::FinishReason reason) {
  switch (reason) {
    case tpserve::v1::FINISH_REASON_LENGTH:
      return "length";
    case tpserve::v1::FINISH_REASON_STOP:
      return "stop";
    case tpserve::v1::FINISH_REASON_EOS:
      return "eos";
    case tpserve::v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    default:
      return "";
  }
}

json ToJson(const GenerateResponse& m) {
  json j = {{"text", m.text()},
            {"token_ids", std::vector<int32_t>(m.token_ids().begin(), m.token_ids().end())}};
  if (m.logprobs_size() > 0) {
    json lps = json::array();
    for (const auto& lp : m.logprobs()) {
      json top = json::array();
      for (const auto& t : lp.top()) {
        top.push_back({{"id", t.token_id()}, {"text", t.text()}, {"logprob", t.logprob()}});
      }
      lps.push_back({{"id", lp.chosen().token_id()},
                     {"text", lp.chosen().text()},
                     {"logprob", lp.chosen().logprob()},
                     {"top", top}});
    }
    j["logprobs"] = lps;
  }
  if (m.finish_reason() != tpserve::v1::FINISH_REASON_UNSPECIFIED) {
    j["finish_reason"] = FinishName(m.finish_reason());
    j["usage"] = {{"prompt_tokens", m.usage().prompt_tokens()},
                  {"completion_tokens", m.usage().completion_tokens()}};
  }
  if (!m.request_id().empty()) j["request_id"] = m.request_id();
  if (m.has_seed()) j["seed"] = m.seed();  // the first message of each stream
  return j;
}

// One line on stderr for each resend of a broken stream.
void LogResume(int64_t tokens_received, const grpc::Status& broken) {
  std::cerr << "tpserve-cli: resuming after " << tokens_received << " tokens: " << Describe(broken)
            << "\n";
}

int Fail(const grpc::Status& status) {
  std::cerr << "tpserve-cli: " << Describe(status) << "\n";
  return static_cast<int>(status.error_code());
}

int UsageError(absl::string_view message) {
  std::cerr << "tpserve-cli: " << message << "\n" << kUsage;
  return kUsageError;
}

int RunGenerate(GenerationClient& client, const std::string& prompt) {
  GenerateRequest request;
  if (absl::Status s = FillSampling(&request); !s.ok()) return UsageError(s.message());
  if (absl::GetFlag(FLAGS_chat_template)) {
    if (!absl::GetFlag(FLAGS_system).empty()) {
      auto* m = request.add_messages();
      m->set_role("system");
      m->set_content(absl::GetFlag(FLAGS_system));
    }
    auto* m = request.add_messages();
    m->set_role("user");
    m->set_content(prompt);
  } else {
    request.set_prompt(prompt);
  }
  const bool as_json = absl::GetFlag(FLAGS_json);
  const grpc::Status status = client.Generate(
      request,
      [&](const GenerateResponse& m) {
        if (as_json) {
          std::cout << ToJson(m).dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
        } else {
          std::cout << m.text();
        }
        std::cout.flush();
      },
      LogResume);
  if (!status.ok()) return Fail(status);
  if (!as_json) std::cout << "\n";
  return 0;
}

std::atomic<bool> interrupted{false};
void OnSigint(int) { interrupted.store(true); }

int RunChat(GenerationClient& client) {
  struct sigaction action = {};
  action.sa_handler = OnSigint;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  GenerateRequest base;
  if (absl::Status s = FillSampling(&base); !s.ok()) return UsageError(s.message());
  std::vector<std::pair<std::string, std::string>> conversation;
  if (!absl::GetFlag(FLAGS_system).empty()) {
    conversation.emplace_back("system", absl::GetFlag(FLAGS_system));
  }
  std::string line;
  while (true) {
    std::cout << "> " << std::flush;
    interrupted.store(false);
    if (!std::getline(std::cin, line)) break;  // EOF (or Ctrl-C at the prompt) ends the chat
    if (line.empty()) continue;
    conversation.emplace_back("user", line);
    GenerateRequest request = base;
    for (const auto& [role, content] : conversation) {
      auto* m = request.add_messages();
      m->set_role(role);
      m->set_content(content);
    }
    std::string answer;
    // Ctrl-C while streaming: cancel this answer, keep the session.
    std::atomic<bool> streaming{true};
    std::thread watcher([&] {
      while (streaming.load()) {
        if (interrupted.exchange(false)) client.Cancel();
        absl::SleepFor(absl::Milliseconds(20));
      }
    });
    const grpc::Status status = client.Generate(
        request,
        [&](const GenerateResponse& m) {
          answer += m.text();
          std::cout << m.text() << std::flush;
        },
        LogResume);
    streaming.store(false);
    watcher.join();
    std::cout << "\n";
    if (status.error_code() == grpc::StatusCode::CANCELLED) {
      std::cout << "[cancelled]\n";
      conversation.pop_back();  // the unanswered question leaves the conversation
      continue;
    }
    if (!status.ok()) {
      std::cerr << "tpserve-cli: " << Describe(status) << "\n";
      conversation.pop_back();
      continue;
    }
    conversation.emplace_back("assistant", answer);
  }
  return 0;
}

int RunTokenize(GenerationClient& client, const std::string& text) {
  tpserve::v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_special_tokens(absl::GetFlag(FLAGS_add_special_tokens));
  tpserve::v1::TokenizeResponse response;
  const grpc::Status status = client.Tokenize(request, &response);
  if (!status.ok()) return Fail(status);
  json j = {
      {"token_ids", std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end())},
      {"pieces", std::vector<std::string>(response.pieces().begin(), response.pieces().end())}};
  std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

int RunInfo(GenerationClient& client) {
  tpserve::v1::ModelInfo info;
  const grpc::Status status = client.GetModelInfo(&info);
  if (!status.ok()) return Fail(status);
  const auto* d = tpserve::v1::ModelInfo::descriptor();
  const auto* r = tpserve::v1::ModelInfo::GetReflection();
  json j;
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    switch (f->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
        j[f->name()] = r->GetString(info, f);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT32:
        j[f->name()] = r->GetUInt32(info, f);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
        j[f->name()] = r->GetInt32(info, f);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
        j[f->name()] = r->GetBool(info, f);
        break;
      default:
        break;
    }
  }
  std::cout << j.dump(2) << "\n";
  return 0;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  tpserve::UnderscoreFlagNames(argc, argv);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  GenerateRequest sampling;
  const absl::Status read =
      tpserve::SamplingFlagsToRequest(argc, argv, tpserve::SamplingFlagSet::kGiven, &sampling);
  SamplingFields() = read.ok() ? absl::StatusOr<GenerateRequest>(std::move(sampling))
                               : absl::StatusOr<GenerateRequest>(read);
  if (args.size() < 2) return UsageError("no command");
  const std::string command = args[1];
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  absl::StatusOr<tpserve::client::ClientCredentials> credentials =
      tpserve::client::MakeClientCredentials(tpserve::client::ClientSecurityFromFlags());
  if (!credentials.ok()) return UsageError(std::string{credentials.status().message()});
  tpserve::client::ResumePolicy resume;
  resume.max_resumes = std::max(0, absl::GetFlag(FLAGS_max_resumes));
  GenerationClient client(absl::GetFlag(FLAGS_server), absl::Seconds(timeout_s), *credentials,
                          resume);
  const std::string rest =
      args.size() > 2 ? absl::StrJoin(std::vector<std::string>(args.begin() + 2, args.end()), " ")
                      : std::string();
  if (command == "generate") {
    if (rest.empty()) return UsageError("generate: no prompt");
    return RunGenerate(client, rest);
  }
  if (command == "chat") return RunChat(client);
  if (command == "tokenize") {
    if (rest.empty()) return UsageError("tokenize: no text");
    return RunTokenize(client, rest);
  }
  if (command == "info") return RunInfo(client);
  if (command == "health") {
    const grpc::Status status = client.Health();
    if (!status.ok()) return Fail(status);
    std::cout << "SERVING\n";
    return 0;
  }
  return UsageError("unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "tpserve-cli: " << e.what() << "\n";
    return 70;
  }
}
