// `tpserve generate`: generation of one prompt through the server's own path: the options
// become the GenerateRequest the gRPC service would get, validated by its RequestValidator
// (optionally rendering the prompt through the chat template), and run by a BatchEngine — the
// one token loop, with its finish decision (EOS, stop strings, stop token ids, length) — on a
// StepExecutor: the model in this process (world size 1) or, with `workers`, a world of
// `tpserve worker` processes (rank 0 samples). The text streams to stdout as it is produced,
// or one JSON object per token. Both modes print the same. Stateless.
#ifndef TPSERVE_SERVER_CLI_GENERATE_COMMAND_H_
#define TPSERVE_SERVER_CLI_GENERATE_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/common/cluster_tls.h"
#include "tpserve/v1/generate.pb.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve::cli {

struct GenerateOptions {
  std::string model_path;
  std::string prompt;
  bool chat = false;  // render the prompt as one user message through the template
  int max_tokens = 128;
  bool ignore_eos = false;
  bool json = false;         // one JSON object per token, then a summary object
  int threads = 0;           // 0: every core
  int device = -1;           // in process: CUDA ordinal to compute on; -1: the CPU
  int prefill_chunk = 256;   // tokens per prefill step
  bool dequantize = false;   // exact mode: weights dequantised to f32 at load
  bool tp_invariant = true;  // the canonical path (EngineOptions::tp_invariant)
  // The request's sampling, logprobs, stop and stop_token_ids fields (SamplingFlagsToRequest).
  tpserve::v1::GenerateRequest sampling;
  // Remote mode: "host:port" of each worker, position = rank (empty: in process). The
  // workers open `model_path` themselves.
  std::vector<std::string> workers;
  uint64_t kv_budget_bytes = 64ull << 20;  // remote mode: KV memory per worker
  // Remote mode: how the workers talk (AUTO: shared memory on one host, else Gloo).
  tpserve::v1::CommBackend comm = tpserve::v1::COMM_BACKEND_AUTO;
  ClusterTlsOptions cluster_tls;  // remote mode: mutual TLS with the workers; none: plaintext
};

// Streams the generation to `out`. Errors (model, prompt, parameters) are the Status.
absl::Status RunGenerate(const GenerateOptions& options, std::ostream& out);

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_GENERATE_COMMAND_H_
