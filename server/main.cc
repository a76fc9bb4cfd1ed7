// tpserve: one binary, one subcommand per role (see kUsage).
#include <algorithm>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "server/cli/generate_command.h"
#include "server/cli/inspect_command.h"
#include "server/cli/serve_command.h"
#include "server/cli/tokenize_command.h"
#include "server/cli/worker_command.h"
#include "server/common/flags/flag_names.h"
#include "server/common/flags/sampling_flags.h"
#include "server/coordinator/speculator.h"
#include "server/coordinator/worker_pool.h"

ABSL_FLAG(std::string, model, "",
          "Model: a GGUF file or a Hugging Face directory (worker: only sets the default "
          "--model_root; the coordinator names the model in Init)");
ABSL_FLAG(std::string, prompt, "What is the capital of France?", "Prompt text");
ABSL_FLAG(bool, chat, false,
          "generate/inspect: render the prompt as a user message through the chat template; "
          "tokenize: lines are JSON lists of {role, content} messages");
ABSL_FLAG(bool, decode, false, "tokenize: lines are JSON arrays of token ids; print text");
ABSL_FLAG(bool, add_special, false, "tokenize: add BOS when the model asks for it");
ABSL_FLAG(bool, render, false, "tokenize --chat: print the rendered prompt instead of ids");
ABSL_FLAG(bool, skip_special, false, "tokenize --decode: leave special tokens out");
ABSL_FLAG(std::string, chat_template, "", "tokenize --chat: a Jinja template file to use instead");
ABSL_FLAG(int32_t, max_tokens, 128, "generate: largest number of tokens to generate");
// generate's sampling and stop flags (--temperature, --top_k, ..., --seed, --logprobs, --stop,
// --stop_token_ids) are server/common/flags/sampling_flags.h's, shared with tpserve-cli.
ABSL_FLAG(bool, ignore_eos, false, "generate: keep going past the end-of-sequence token");
ABSL_FLAG(bool, json, false, "generate: one JSON object per token, then a summary");
ABSL_FLAG(bool, dequantize, false,
          "generate/worker/serve/coordinator: exact mode, every weight dequantised to f32 at load "
          "(default: kept in the file's quantised blocks)");
ABSL_FLAG(bool, tp_invariant, true,
          "generate/serve/coordinator: the canonical path, the row-parallel projections summed "
          "exactly, so that every world size gives the same logits bit for bit (false: summed "
          "in float, as before it; the logits then depend on the world size)");
ABSL_FLAG(int32_t, threads, 0,
          "generate: compute threads (0: every core); with --workers, serve, coordinator: per "
          "worker (0: each worker's usable CPUs shared among the workers on its host)");
ABSL_FLAG(std::string, workers, "",
          "generate: run on these workers, HOST:PORT,... (position = rank) instead of in process");
ABSL_FLAG(uint64_t, kv_budget_mb, 256,
          "generate --workers, serve: KV cache memory per worker, MiB");
ABSL_FLAG(std::string, listen, "", "worker: HOST:PORT to serve on (port 0: any free one)");
ABSL_FLAG(std::string, port_file, "", "worker: write the bound port to this file");
ABSL_FLAG(int32_t, metrics_port, 0,
          "worker/serve/coordinator: Prometheus /metrics port on the listen host (0: none); "
          "serve's worker rank r uses metrics_port + 1 + r");
ABSL_FLAG(int32_t, tp, 2, "serve: tensor-parallel world size (local worker processes)");
ABSL_FLAG(int32_t, device, -1,
          "worker, generate: CUDA ordinal of the GPU to compute on (-1: the CPU)");
ABSL_FLAG(std::string, devices, "",
          "serve: GPU of each local worker, comma-separated (0,1: rank 0 on GPU 0, rank 1 on "
          "GPU 1); empty: CPU workers");
ABSL_FLAG(std::string, comm, "",
          "generate --workers/serve/coordinator: worker communication, auto, shm, gloo or nccl "
          "(empty: nccl when "
          "serve's --devices are distinct GPUs, shm when they share one, else auto: shared "
          "memory when every worker is on one host, Gloo over TCP otherwise; GPU workers take "
          "auto as nccl)");
ABSL_FLAG(std::string, host, "127.0.0.1", "serve/coordinator: address to listen on");
ABSL_FLAG(std::string, served_model_name, "",
          "serve/coordinator: the model's name in GetModelInfo and the OpenAI API's `model` "
          "(default: the file's general.name, else its file name)");
ABSL_FLAG(bool, prefix_caching, true,
          "serve/coordinator: reuse the KV blocks of shared prompt prefixes (false: off)");
ABSL_FLAG(std::string, speculative, "off",
          "serve/coordinator: speculative decoding, off, ngram (prompt lookup: proposals from "
          "the sequence's own prompt and output) or draft (a smaller model with the same "
          "vocabulary, --draft_model, run in the coordinator's process); proposals are verified "
          "in one step and the tokens are identical to plain decoding");
ABSL_FLAG(std::string, draft_model, "",
          "serve/coordinator --speculative draft: the draft model's GGUF (the target's "
          "vocabulary; e.g. scripts/requantize.py --layers K of the target)");
ABSL_FLAG(int32_t, num_speculative_tokens, 4,
          "serve/coordinator --speculative: the most tokens proposed per sequence and step, "
          "[1, 16]");
ABSL_FLAG(int, http_port, 0,
          "serve/coordinator: port of the OpenAI-compatible HTTP API on --host (0: off)");
ABSL_FLAG(int, http_max_connections, 64,
          "serve/coordinator: HTTP connections served at once, one thread each (an open stream "
          "holds one); another is answered 503 at once");
ABSL_FLAG(int32_t, port, 50051, "serve/coordinator: port of the public API (0: any free one)");
ABSL_FLAG(bool, reflection, false,
          "serve/coordinator: enable gRPC server reflection on the public port (it lists the "
          "services and their messages to anyone who can connect)");
ABSL_FLAG(std::string, tls_cert_file, "",
          "serve/coordinator: PEM certificate chain of the public port; with --tls_key_file it "
          "serves TLS (files re-read when they change, no restart)");
ABSL_FLAG(std::string, tls_key_file, "", "serve/coordinator: PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "serve/coordinator: PEM CA bundle; clients must present a certificate it signed "
          "(mutual TLS)");
ABSL_FLAG(int32_t, tls_refresh_interval_s, 60,
          "serve/coordinator: how often the TLS files are looked at for changes, seconds");
ABSL_FLAG(std::string, api_key_file, "",
          "serve/coordinator: API keys, one per line (# comments); every Generation call must "
          "send 'authorization: Bearer KEY' (the file is re-read when it changes)");
ABSL_FLAG(std::string, cluster_ca_file, "",
          "worker/coordinator/generate --workers: PEM CA of the cluster; the peer's certificate "
          "must chain to it (mutual TLS between coordinator and workers; give all three "
          "--cluster_* files). serve makes its own for its local workers");
ABSL_FLAG(std::string, cluster_cert_file, "",
          "worker/coordinator/generate --workers: PEM certificate of this side, signed by "
          "--cluster_ca_file (a worker's must name, as a DNS or IP subjectAltName, the host the "
          "coordinator dials it by)");
ABSL_FLAG(std::string, cluster_key_file, "",
          "worker/coordinator/generate --workers: PEM private key of --cluster_cert_file");
ABSL_FLAG(bool, insecure_cluster, false,
          "worker: without cluster credentials, listen on --listen as given even when it is "
          "not loopback (plaintext, unauthenticated: anyone who reaches the port can drive it)");
ABSL_FLAG(std::string, model_root, "",
          "worker: load models only from under this directory (default: the directory of "
          "--model; with neither, every model is refused)");
ABSL_FLAG(std::string, metrics_host, "",
          "serve/coordinator: address the /metrics endpoint binds (empty: the --host address)");
ABSL_FLAG(uint32_t, max_input_tokens, 1024, "serve/coordinator: largest prompt, in tokens");
ABSL_FLAG(uint32_t, max_total_tokens, 2048,
          "serve/coordinator: largest prompt + max_tokens (capped at the context length)");
ABSL_FLAG(uint32_t, max_new_tokens, 1024, "serve/coordinator: largest max_tokens of a request");
ABSL_FLAG(uint32_t, max_queue, 256, "serve/coordinator: requests waiting for admission");
ABSL_FLAG(uint32_t, max_stop_sequences, 4, "serve/coordinator: stop strings per request");
ABSL_FLAG(int64_t, max_batch_tokens, 512, "serve/coordinator: tokens computed per step");
ABSL_FLAG(int64_t, max_running, 64, "serve/coordinator: sequences in the running batch");
ABSL_FLAG(int32_t, drain_timeout_s, 30,
          "serve/coordinator: on SIGTERM, how long running streams may take to finish");
ABSL_FLAG(int32_t, step_timeout_s, 30, "serve/coordinator: deadline of one worker step");
ABSL_FLAG(double, hang_timeout_s, 2.0,
          "serve/coordinator: a worker that sends nothing (not even its heartbeat) for this long "
          "is hung: the world is rebuilt without waiting for the step deadline, and serve "
          "restarts that child (0: off)");
ABSL_FLAG(int32_t, min_world_size, -1,
          "serve/coordinator: an elastic world: when a worker cannot rejoin within "
          "--rejoin_timeout_s, serve on with the others, down to this many (re-planning the "
          "shards), and grow back when it answers again (-1: the full world, never shrinking)");
ABSL_FLAG(double, rejoin_timeout_s, 5.0,
          "serve/coordinator: with --min_world_size, how long a lost worker has to rejoin "
          "before the world goes on without it");
ABSL_FLAG(std::string, step_trace_file, "",
          "serve/coordinator: write one JSON line per worker step here (wall, overhead, each "
          "rank's compute and collective time, in microseconds)");

namespace {

constexpr char kUsage[] =
    "tpserve <command> [flags]\n"
    "commands:\n"
    "  inspect  --model PATH [--prompt TEXT]\n"
    "  tokenize --model PATH [--decode [--skip_special]] [--chat [--render]\n"
    "           [--chat_template FILE]] [--add_special]   (JSON lines on stdin -> stdout)\n"
    "  generate --model PATH --prompt TEXT [--chat] [--max_tokens N] [--temperature T]\n"
    "           [--top_k K] [--top_p P] [--min_p P] [--typical_p P] [--seed S] [--stop S,...]\n"
    "           [--stop_token_ids ID,...] [--ignore_eos] [--threads N] [--json] [--dequantize]\n"
    "           [--tp_invariant=false] [--device N (on a GPU)]\n"
    "           [--workers HOST:PORT,... [--kv_budget_mb M] [--comm C] [cluster]]\n"
    "           (on a world of workers)\n"
    "  worker   --listen HOST:PORT [--port_file F] [--device N] [--dequantize]\n"
    "           [--model_root DIR | --model PATH] [cluster | --insecure_cluster]\n"
    "           (until SIGINT/SIGTERM)\n"
    "  serve    --model PATH [--tp N] [--devices 0,1,...] [--comm auto|shm|gloo|nccl]\n"
    "           [--host H] [--port P] [--http_port P] [--served_model_name NAME]\n"
    "           [--threads N] [--dequantize] [--tp_invariant=false] [limits]\n"
    "           [security]\n"
    "           (N local workers and the public API; SIGTERM drains)\n"
    "  coordinator --model PATH --workers HOST:PORT,... [--host H] [--port P] [--http_port P]\n"
    "           [--tp_invariant=false] [--min_world_size N [--rejoin_timeout_s S]]\n"
    "           [limits] [security] [cluster]\n"
    "  security: [--tls_cert_file F --tls_key_file F [--tls_client_ca_file F]]\n"
    "           [--api_key_file F] [--reflection] [--metrics_host H]\n"
    "  cluster: --cluster_ca_file F --cluster_cert_file F --cluster_key_file F (mutual TLS\n"
    "           between coordinator and workers; serve makes its own, in memory)\n"
    "flags may be written with dashes or underscores (--max-tokens = --max_tokens)\n";

int Finish(const absl::Status& status) {
  if (status.ok()) return 0;
  std::cerr << "tpserve: " << status << "\n";
  return 1;
}

// "0,1" → {0, 1}; InvalidArgument naming --devices for anything else.
absl::StatusOr<std::vector<int>> ParseDevices(const std::string& text) {
  std::vector<int> devices;
  if (text.empty()) return devices;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int d = -1;
    if (!absl::SimpleAtoi(part, &d) || d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices: '", part, "' is not a GPU ordinal (want e.g. 0,1)"));
    }
    devices.push_back(d);
  }
  return devices;
}

// --comm, or its default: NCCL for distinct GPUs; shared memory (staged) for GPUs shared by
// local ranks, which NCCL refuses; AUTO for CPU workers.
absl::StatusOr<tpserve::v1::CommBackend> CommBackendFromFlags(const std::vector<int>& devices) {
  const std::string comm = absl::GetFlag(FLAGS_comm);
  if (comm == "auto") return tpserve::v1::COMM_BACKEND_AUTO;
  if (comm == "shm") return tpserve::v1::COMM_BACKEND_SHM;
  if (comm == "gloo") return tpserve::v1::COMM_BACKEND_GLOO;
  if (comm == "nccl") return tpserve::v1::COMM_BACKEND_NCCL;
  if (!comm.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--comm: '", comm, "' is not auto, shm, gloo or nccl"));
  }
  if (devices.empty()) return tpserve::v1::COMM_BACKEND_AUTO;
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  return distinct ? tpserve::v1::COMM_BACKEND_NCCL : tpserve::v1::COMM_BACKEND_SHM;
}

tpserve::ClusterTlsOptions ClusterTlsFromFlags() {
  return {absl::GetFlag(FLAGS_cluster_ca_file), absl::GetFlag(FLAGS_cluster_cert_file),
          absl::GetFlag(FLAGS_cluster_key_file)};
}

absl::StatusOr<tpserve::cli::GenerateOptions> GenerateOptionsFromFlags(int argc, char** argv) {
  tpserve::cli::GenerateOptions o;
  o.model_path = absl::GetFlag(FLAGS_model);
  o.prompt = absl::GetFlag(FLAGS_prompt);
  o.chat = absl::GetFlag(FLAGS_chat);
  o.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  o.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  o.json = absl::GetFlag(FLAGS_json);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.device = absl::GetFlag(FLAGS_device);
  o.dequantize = absl::GetFlag(FLAGS_dequantize);
  o.tp_invariant = absl::GetFlag(FLAGS_tp_invariant);
  // Every sampling flag, defaults included: `generate` is greedy unless told otherwise.
  if (absl::Status read =
          tpserve::SamplingFlagsToRequest(argc, argv, tpserve::SamplingFlagSet::kAll, &o.sampling);
      !read.ok()) {
    return read;
  }
  const std::string workers = absl::GetFlag(FLAGS_workers);
  if (!workers.empty()) {
    absl::StatusOr<std::vector<std::string>> list = tpserve::coordinator::ParseWorkerList(workers);
    if (!list.ok()) return list.status();
    o.workers = *std::move(list);
    if (o.device >= 0) {
      return absl::InvalidArgumentError(
          "--device: generate --workers computes on the workers; start each worker with "
          "--device N instead");
    }
  }
  o.kv_budget_bytes = absl::GetFlag(FLAGS_kv_budget_mb) << 20;
  o.cluster_tls = ClusterTlsFromFlags();
  absl::StatusOr<tpserve::v1::CommBackend> comm = CommBackendFromFlags({});
  if (!comm.ok()) return comm.status();
  o.comm = *comm;
  return o;
}

absl::StatusOr<tpserve::cli::ServeOptions> ServeOptionsFromFlags() {
  tpserve::cli::ServeOptions o;
  tpserve::coordinator::CoordinatorOptions& c = o.coordinator;
  c.model_path = absl::GetFlag(FLAGS_model);
  c.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  c.listen = absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  c.reflection = absl::GetFlag(FLAGS_reflection);
  c.tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  c.tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
  c.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  c.tls.refresh_interval = absl::Seconds(absl::GetFlag(FLAGS_tls_refresh_interval_s));
  c.api_key_file = absl::GetFlag(FLAGS_api_key_file);
  c.step_trace_file = absl::GetFlag(FLAGS_step_trace_file);
  c.limits.max_input_tokens = absl::GetFlag(FLAGS_max_input_tokens);
  c.limits.max_total_tokens = absl::GetFlag(FLAGS_max_total_tokens);
  c.limits.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  c.limits.max_queue = absl::GetFlag(FLAGS_max_queue);
  c.limits.max_stop_sequences = absl::GetFlag(FLAGS_max_stop_sequences);
  c.engine.scheduler.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  c.engine.scheduler.max_running = absl::GetFlag(FLAGS_max_running);
  c.engine.prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  absl::StatusOr<tpserve::coordinator::SpeculativeMode> speculative =
      tpserve::coordinator::ParseSpeculativeMode(absl::GetFlag(FLAGS_speculative));
  if (!speculative.ok()) return speculative.status();
  c.engine.speculative.mode = *speculative;
  c.engine.speculative.max_draft = absl::GetFlag(FLAGS_num_speculative_tokens);
  c.engine.speculative.draft_model = absl::GetFlag(FLAGS_draft_model);
  if (absl::Status valid = tpserve::coordinator::ValidateSpeculativeOptions(c.engine.speculative);
      !valid.ok()) {
    return valid;
  }
  c.pool.kv_budget_bytes = absl::GetFlag(FLAGS_kv_budget_mb) << 20;
  c.pool.threads = static_cast<uint32_t>(std::max(0, absl::GetFlag(FLAGS_threads)));
  c.pool.dequantize = absl::GetFlag(FLAGS_dequantize);
  c.pool.float_row_sums = !absl::GetFlag(FLAGS_tp_invariant);
  c.pool.step_deadline = absl::Seconds(absl::GetFlag(FLAGS_step_timeout_s));
  c.pool.hang_timeout = absl::Seconds(std::max(0.0, absl::GetFlag(FLAGS_hang_timeout_s)));
  c.pool.min_world_size = absl::GetFlag(FLAGS_min_world_size);
  if (absl::GetFlag(FLAGS_rejoin_timeout_s) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rejoin_timeout_s: ", absl::GetFlag(FLAGS_rejoin_timeout_s), " is negative"));
  }
  c.pool.rejoin_timeout = absl::Seconds(absl::GetFlag(FLAGS_rejoin_timeout_s));
  o.tp = absl::GetFlag(FLAGS_tp);
  absl::StatusOr<std::vector<int>> devices = ParseDevices(absl::GetFlag(FLAGS_devices));
  if (!devices.ok()) return devices.status();
  o.devices = *std::move(devices);
  absl::StatusOr<tpserve::v1::CommBackend> backend = CommBackendFromFlags(o.devices);
  if (!backend.ok()) return backend.status();
  c.pool.backend = *backend;
  o.drain_timeout = absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  if (absl::GetFlag(FLAGS_http_port) > 0) {
    o.http.listen = absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_http_port));
  }
  o.http.threads = absl::GetFlag(FLAGS_http_max_connections);
  o.binary = "/proc/self/exe";
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  o.cluster_tls = ClusterTlsFromFlags();
  return o;
}

absl::Status CheckServeFlags() {
  if (absl::GetFlag(FLAGS_model).empty()) return absl::InvalidArgumentError("--model is required");
  if (absl::GetFlag(FLAGS_max_batch_tokens) < 1 || absl::GetFlag(FLAGS_max_running) < 1) {
    return absl::InvalidArgumentError("--max_batch_tokens and --max_running must be >= 1");
  }
  if (absl::GetFlag(FLAGS_max_total_tokens) < 2) {
    return absl::InvalidArgumentError("--max_total_tokens must be >= 2");
  }
  if (absl::GetFlag(FLAGS_port) < 0 || absl::GetFlag(FLAGS_port) > 65535) {
    return absl::InvalidArgumentError("--port must be in [0, 65535]");
  }
  if (absl::GetFlag(FLAGS_http_port) < 0 || absl::GetFlag(FLAGS_http_port) > 65535) {
    return absl::InvalidArgumentError("--http_port must be in [0, 65535] (0: off)");
  }
  if (absl::GetFlag(FLAGS_http_max_connections) < 1 ||
      absl::GetFlag(FLAGS_http_max_connections) > 4096) {
    return absl::InvalidArgumentError("--http_max_connections must be in [1, 4096]");
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  tpserve::UnderscoreFlagNames(argc, argv);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;  // servers log to stderr (containers, systemd); glog would write files
  google::InitGoogleLogging(argv[0]);
  if (args.size() != 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = args[1];
  if (command == "inspect") {
    return Finish(tpserve::cli::RunInspect(
        {absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_prompt)}, std::cout));
  }
  if (command == "tokenize") {
    tpserve::cli::TokenizeOptions options;
    options.model_path = absl::GetFlag(FLAGS_model);
    options.decode = absl::GetFlag(FLAGS_decode);
    options.chat = absl::GetFlag(FLAGS_chat);
    options.add_special = absl::GetFlag(FLAGS_add_special);
    options.render = absl::GetFlag(FLAGS_render);
    options.skip_special = absl::GetFlag(FLAGS_skip_special);
    options.chat_template_path = absl::GetFlag(FLAGS_chat_template);
    return Finish(tpserve::cli::RunTokenize(options, std::cin, std::cout));
  }
  if (command == "generate") {
    absl::StatusOr<tpserve::cli::GenerateOptions> options = GenerateOptionsFromFlags(argc, argv);
    if (!options.ok()) return Finish(options.status());
    return Finish(tpserve::cli::RunGenerate(*options, std::cout));
  }
  if (command == "worker") {
    tpserve::cli::WorkerCommandOptions options;
    options.listen = absl::GetFlag(FLAGS_listen);
    options.port_file = absl::GetFlag(FLAGS_port_file);
    options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
    options.device = absl::GetFlag(FLAGS_device);
    options.dequantize = absl::GetFlag(FLAGS_dequantize);
    options.cluster_tls = ClusterTlsFromFlags();
    options.insecure_cluster = absl::GetFlag(FLAGS_insecure_cluster);
    options.model_root = absl::GetFlag(FLAGS_model_root);
    options.model = absl::GetFlag(FLAGS_model);
    return Finish(tpserve::cli::RunWorker(options));
  }
  if (command == "serve" || command == "coordinator") {
    if (absl::Status flags = CheckServeFlags(); !flags.ok()) return Finish(flags);
    absl::StatusOr<tpserve::cli::ServeOptions> parsed = ServeOptionsFromFlags();
    if (!parsed.ok()) return Finish(parsed.status());
    tpserve::cli::ServeOptions options = *std::move(parsed);
    if (command == "coordinator") {
      absl::StatusOr<std::vector<std::string>> list =
          tpserve::coordinator::ParseWorkerList(absl::GetFlag(FLAGS_workers));
      if (!list.ok()) return Finish(list.status());
      options.coordinator.pool.workers = *std::move(list);
    }
    return Finish(tpserve::cli::RunServe(std::move(options)));
  }
  std::cerr << "tpserve: unknown command '" << command << "'\n" << kUsage;
  return 2;
}
