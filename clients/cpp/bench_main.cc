// tpserve-bench: a load generator for a tpserve server. Sends --requests requests either at a
// fixed --concurrency (each slot starts the next request when its previous one ends) or at a
// Poisson --rate (requests/s, exponential gaps, no limit on requests in flight), after
// --warmup requests that are not measured. Prompts are synthetic token ids of --prompt_len
// tokens or lines of --prompts_file; outputs ask for --output_len tokens (ignore_eos by
// default, so the length is what was asked). Prints and writes (--json_out) the summary:
// requests/s, output tokens/s, TTFT, inter-token and end-to-end latency p50/p90/p99, errors by
// code, and the resends of broken streams (up to --max_resumes per request, each continuing
// where its stream broke). Exit status: 0 when at least one request succeeded.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "clients/cpp/bench_report.h"
#include "clients/cpp/generation_client.h"
#include "clients/cpp/load_spec.h"
#include "clients/cpp/security_flags.h"
#include "server/common/flags/flag_names.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "tpserve server, HOST:PORT");
ABSL_FLAG(int64_t, requests, 64, "measured requests");
ABSL_FLAG(int64_t, concurrency, 8, "requests in flight (when --rate is 0)");
ABSL_FLAG(double, rate, 0, "Poisson arrival rate in requests/s (0: fixed concurrency)");
ABSL_FLAG(std::string, prompt_len, "uniform:16:64", "prompt tokens: fixed:N or uniform:A:B");
ABSL_FLAG(std::string, output_len, "fixed:32", "output tokens: fixed:N or uniform:A:B");
ABSL_FLAG(std::string, prompts_file, "", "prompts, one per line, instead of synthetic ids");
ABSL_FLAG(int64_t, shared_prefix_len, 0,
          "synthetic ids every prompt starts with (a shared system prompt), before its own "
          "--prompt_len");
ABSL_FLAG(int64_t, warmup, 2, "unmeasured requests first");
ABSL_FLAG(uint64_t, seed, 1, "seed of the lengths and synthetic prompts");
ABSL_FLAG(float, temperature, 0.0f, "sampling temperature of every request");
ABSL_FLAG(bool, ignore_eos, true, "generate exactly the drawn output length");
ABSL_FLAG(double, timeout_s, 600, "deadline of each request");
ABSL_FLAG(int32_t, max_resumes, 8,
          "resends of a request whose stream broke (UNAVAILABLE, a reset), continuing where it "
          "broke; 0: none");
ABSL_FLAG(std::string, json_out, "", "write the summary JSON here too");
ABSL_FLAG(std::string, label, "", "free text stored in the summary (e.g. the server setup)");

namespace {

using tpserve::client::GenerationClient;
using tpserve::client::RequestRecord;

// How every request reaches the server, from the flags.
struct Target {
  std::string server;
  tpserve::client::ClientCredentials credentials;
  tpserve::client::ResumePolicy resume;
  double timeout_s = 0;
};

// Runs one request; times are seconds since `t0`.
RequestRecord RunOne(const Target& target, const tpserve::v1::GenerateRequest& request,
                     absl::Time t0) {
  GenerationClient client(target.server, absl::Seconds(target.timeout_s), target.credentials,
                          target.resume);
  RequestRecord r;
  r.start_s = absl::ToDoubleSeconds(absl::Now() - t0);
  const grpc::Status status = client.Generate(
      request,
      [&](const tpserve::v1::GenerateResponse& m) {
        if (m.token_ids_size() > 0) {
          r.message_s.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
          r.output_tokens += m.token_ids_size();
        }
        if (m.has_usage()) r.prompt_tokens = m.usage().prompt_tokens();
      },
      [&](int64_t, const grpc::Status&) { ++r.resumes; });
  r.end_s = absl::ToDoubleSeconds(absl::Now() - t0);
  if (!status.ok()) {
    const std::string described = tpserve::client::Describe(status);
    r.error = described.substr(0, described.find(':'));
  }
  return r;
}

// The load's shape, from the flags; a usage error is InvalidArgument.
struct Load {
  Target target;
  int64_t requests = 0;
  int64_t concurrency = 0;
  double rate = 0;  // requests/s; 0: fixed concurrency
  tpserve::client::LengthDistribution prompt_len;
  tpserve::client::LengthDistribution output_len;
  std::vector<std::string> prompts;  // --prompts_file's lines, or empty for synthetic ids
};

absl::StatusOr<Load> LoadFromFlags() {
  auto prompt_len = tpserve::client::LengthDistribution::Parse(absl::GetFlag(FLAGS_prompt_len));
  if (!prompt_len.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--prompt_len ", prompt_len.status().message()));
  }
  auto output_len = tpserve::client::LengthDistribution::Parse(absl::GetFlag(FLAGS_output_len));
  if (!output_len.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--output_len ", output_len.status().message()));
  }
  Load load{{},
            absl::GetFlag(FLAGS_requests),
            absl::GetFlag(FLAGS_concurrency),
            absl::GetFlag(FLAGS_rate),
            *prompt_len,
            *output_len,
            {}};
  if (load.requests < 1 || load.concurrency < 1 || load.rate < 0) {
    return absl::InvalidArgumentError("--requests and --concurrency must be >= 1, --rate >= 0");
  }
  if (!absl::GetFlag(FLAGS_prompts_file).empty()) {
    auto read = tpserve::client::ReadPrompts(absl::GetFlag(FLAGS_prompts_file));
    if (!read.ok()) return read.status();
    load.prompts = *std::move(read);
  }
  absl::StatusOr<tpserve::client::ClientCredentials> credentials =
      tpserve::client::MakeClientCredentials(tpserve::client::ClientSecurityFromFlags());
  if (!credentials.ok()) return credentials.status();
  load.target = {absl::GetFlag(FLAGS_server), *credentials, {}, absl::GetFlag(FLAGS_timeout_s)};
  load.target.resume.max_resumes = std::max(0, absl::GetFlag(FLAGS_max_resumes));
  return load;
}

// Runs the measured requests, at a fixed concurrency or at Poisson arrivals; one record each.
std::vector<RequestRecord> RunMeasured(const Load& load,
                                       const tpserve::client::RequestFactory& factory,
                                       absl::Time t0) {
  std::vector<RequestRecord> records(static_cast<size_t>(load.requests));
  std::vector<std::thread> threads;
  if (load.rate > 0) {
    std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
    std::exponential_distribution<double> gap(load.rate);
    absl::Time next = t0;
    for (int64_t i = 0; i < load.requests; ++i) {
      absl::SleepFor(next - absl::Now());
      threads.emplace_back(
          [&, i] { records[static_cast<size_t>(i)] = RunOne(load.target, factory.Make(i), t0); });
      next += absl::Seconds(gap(rng));
    }
  } else {
    std::atomic<int64_t> next{0};
    for (int64_t c = 0; c < std::min(load.concurrency, load.requests); ++c) {
      threads.emplace_back([&] {
        for (int64_t i = next++; i < load.requests; i = next++) {
          records[static_cast<size_t>(i)] = RunOne(load.target, factory.Make(i), t0);
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  return records;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tpserve-bench --server HOST:PORT [--requests N] "
      "[--concurrency C | --rate R] [--prompt_len D] [--output_len D]\n"
      "  [--tls_ca_file F [--tls_cert_file F --tls_key_file F]] [--api_key KEY]\n"
      "flags may be written with dashes or underscores (--output-len = --output_len)");
  tpserve::UnderscoreFlagNames(argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<Load> load = LoadFromFlags();
  if (!load.ok()) {
    std::cerr << "tpserve-bench: " << load.status().message() << "\n";
    return 64;
  }
  tpserve::v1::ModelInfo info;
  if (grpc::Status s =
          GenerationClient(load->target.server, absl::Seconds(30), load->target.credentials)
              .GetModelInfo(&info);
      !s.ok()) {
    std::cerr << "tpserve-bench: " << tpserve::client::Describe(s) << "\n";
    return static_cast<int>(s.error_code());
  }
  tpserve::v1::GenerateRequest sampling;
  sampling.set_temperature(absl::GetFlag(FLAGS_temperature));
  sampling.set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  // Synthetic prompts avoid the low ids, where tokenizers keep their special tokens.
  const auto last_id = static_cast<int32_t>(info.vocab_size()) - 1;
  const tpserve::client::RequestFactory factory(
      load->prompt_len, load->output_len, load->prompts, absl::GetFlag(FLAGS_seed),
      std::min<int32_t>(1000, last_id / 2), last_id, sampling,
      std::max<int64_t>(0, absl::GetFlag(FLAGS_shared_prefix_len)));

  int64_t warmup_tokens = 0;
  for (int64_t i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
    warmup_tokens += RunOne(load->target, factory.Make(-1 - i), absl::Now()).output_tokens;
  }
  const absl::Time t0 = absl::Now();
  const std::vector<RequestRecord> records = RunMeasured(*load, factory, t0);
  const double duration_s = absl::ToDoubleSeconds(absl::Now() - t0);

  const nlohmann::json config = {{"server", load->target.server},
                                 {"label", absl::GetFlag(FLAGS_label)},
                                 {"requests", load->requests},
                                 {"concurrency", load->rate > 0 ? 0 : load->concurrency},
                                 {"rate", load->rate},
                                 {"prompt_len", absl::GetFlag(FLAGS_prompt_len)},
                                 {"output_len", absl::GetFlag(FLAGS_output_len)},
                                 {"prompts_file", absl::GetFlag(FLAGS_prompts_file)},
                                 {"world_size", info.world_size()},
                                 {"model", info.model_name()}};
  nlohmann::json summary = tpserve::client::Summarize(records, duration_s, config);
  summary["warmup_output_tokens"] = warmup_tokens;  // generated too, but not measured
  std::cout << summary.dump(2) << "\n";
  if (!absl::GetFlag(FLAGS_json_out).empty()) {
    std::ofstream(absl::GetFlag(FLAGS_json_out)) << summary.dump(2) << "\n";
  }
  std::cerr << "tpserve-bench: " << tpserve::client::SummaryLine(summary) << "\n";
  return summary["ok"].get<int64_t>() > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "tpserve-bench: " << e.what() << "\n";
    return 70;
  }
}
