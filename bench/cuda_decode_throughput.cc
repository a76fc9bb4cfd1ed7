// cuda_decode_throughput: decode tokens/s of a synthetic Llama-3-8B-shaped model (random bf16
// weights made on the GPU) at several batch sizes, and the fraction of the HBM bandwidth limit
// each reaches: (weight bytes + KV bytes read per step) / step time / bandwidth. Each batch's
// sequences first prefill `--context` tokens; the timed decode steps then read that cache.
// Prints a table and writes JSON (--json_out). Needs a GPU; exits 2 with the reason without one.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/cuda/check.h"
#include "kernels/kv_block.h"
#include "nlohmann/json.hpp"
#include "server/comm/communicator.h"
#include "server/common/status_macros.h"
#include "server/engine/cuda/cuda_backend.h"
#include "server/engine/llama_model.h"

ABSL_FLAG(std::string, batches, "1,16,64", "decode batch sizes, comma-separated");
ABSL_FLAG(int32_t, context, 512, "tokens each sequence holds before the timed decode steps");
ABSL_FLAG(int32_t, steps, 32, "timed decode steps per batch size");
ABSL_FLAG(int32_t, warmup, 4, "untimed decode steps before them");
ABSL_FLAG(int32_t, device, 0, "CUDA ordinal");
ABSL_FLAG(double, hbm_gbps, 4800.0, "HBM bandwidth the fraction is taken of, GB/s (H200: 4800)");
ABSL_FLAG(std::string, json_out, "", "write the results here as JSON");

namespace tpserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Meta-Llama-3-8B: 32 layers, d 4096, 32 query / 8 KV heads of 128, FFN 14336, vocab 128256.
model::ModelConfig Llama3_8B() {
  model::ModelConfig c;
  c.architecture = "llama";
  c.name = "llama-3-8b-shape (synthetic bf16)";
  c.vocab_size = 128256;
  c.d_model = 4096;
  c.n_layers = 32;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.ffn_dim = 14336;
  c.rope_theta = 500000.0;
  c.rope_style = model::RopeStyle::kNeox;
  c.norm_eps = 1e-5;
  c.context_length = 8192;
  return c;
}

// Device-to-device copy bandwidth (bytes read + written per second) over `bytes`.
absl::StatusOr<double> CopyBandwidth(int64_t bytes) {
  // Whatever was made is released on every return, the error ones included.
  void* a = nullptr;
  void* b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  absl::Cleanup release = [&] {
    if (start != nullptr) (void)cudaEventDestroy(start);
    if (stop != nullptr) (void)cudaEventDestroy(stop);
    if (a != nullptr) (void)cudaFree(a);
    if (b != nullptr) (void)cudaFree(b);
  };
  CUDA_RETURN_IF_ERROR(cudaMalloc(&a, bytes));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&b, bytes));
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));  // warm-up
  constexpr int kReps = 10;
  CUDA_RETURN_IF_ERROR(cudaEventRecord(start));
  for (int i = 0; i < kReps; ++i) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(stop));
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
  return 2.0 * static_cast<double>(bytes) * kReps / (ms * 1e-3);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status Run() {
  std::vector<int> batches;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int b = 0;
    if (!absl::SimpleAtoi(part, &b) || b < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--batches: bad entry '", part, "'"));
    }
    batches.push_back(b);
  }
  const int context = absl::GetFlag(FLAGS_context);
  const int steps = absl::GetFlag(FLAGS_steps);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  if (context < 1 || steps < 1 || warmup < 0) {
    return absl::InvalidArgumentError("--context and --steps must be >= 1, --warmup >= 0");
  }
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const model::ModelConfig config = Llama3_8B();
  ASSIGN_OR_RETURN(model::ShardPlan plan, model::MakeShardPlan(config, 0, 1));

  constexpr int kBlock = kKvBlockSize;
  constexpr int kChunk = 512;
  const int blocks_per_seq = (context + warmup + steps + kBlock - 1) / kBlock;
  engine::EngineOptions options;
  options.max_batch_tokens = std::max(kChunk, max_batch);
  options.max_logit_rows = max_batch;
  options.kv_block_size = kBlock;
  options.kv_blocks = static_cast<int64_t>(max_batch) * blocks_per_seq;

  ASSIGN_OR_RETURN(std::unique_ptr<engine::CudaBackend> backend,
                   engine::CudaBackend::Create(absl::GetFlag(FLAGS_device)));
  cudaDeviceProp prop;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, absl::GetFlag(FLAGS_device)));
  comm::SingleRankCommunicator comm;
  const auto made = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<engine::LlamaModel> model,
                   engine::LlamaModel::CreateRandom(config, plan, backend.get(), &comm, options,
                                                    /*seed=*/1));
  const double create_s = std::chrono::duration<double>(Clock::now() - made).count();

  // Prefill every sequence's context once; each batch size then decodes from position
  // `context` (overwriting the same slots: values do not matter to the timing).
  std::vector<std::vector<int32_t>> tables(max_batch);
  for (int s = 0; s < max_batch; ++s) {
    tables[s].resize(blocks_per_seq);
    std::iota(tables[s].begin(), tables[s].end(), s * blocks_per_seq);
  }
  std::vector<float> logits;
  const auto prefill_start = Clock::now();
  for (int s = 0; s < max_batch; ++s) {
    for (int pos = 0; pos < context; pos += kChunk) {
      engine::StepBatch b;
      engine::StepSequence seq;
      const int n = std::min(kChunk, context - pos);
      for (int i = 0; i < n; ++i) seq.tokens.push_back((s * 7919 + (pos + i) * 104729) % 128000);
      seq.start_pos = pos;
      seq.block_table = tables[s];
      seq.want_logits = pos + n == context;
      b.sequences.push_back(std::move(seq));
      RETURN_IF_ERROR(model->Forward(b, &logits));
    }
  }
  const double prefill_s = std::chrono::duration<double>(Clock::now() - prefill_start).count();

  ASSIGN_OR_RETURN(const double copy_bps, CopyBandwidth(int64_t{4} << 30));
  const double hbm_bps = absl::GetFlag(FLAGS_hbm_gbps) * 1e9;
  const int64_t d = config.d_model;
  // Bytes one decode step reads: every weight except the embedding table (only the batch's
  // rows of it), and each sequence's K and V over its context.
  const int64_t embedding_bytes = config.vocab_size * d * 2;
  const int64_t kv_bytes_per_token = 2 * config.n_layers * config.n_kv_heads * config.head_dim * 2;

  nlohmann::json results = nlohmann::json::array();
  std::printf("%-6s %12s %12s %14s %10s %10s\n", "batch", "tokens/s", "step ms", "GB/step",
              "of HBM", "of copy");
  for (int batch : batches) {
    std::vector<double> step_s;
    double kv_read = 0.0;
    for (int i = 0; i < warmup + steps; ++i) {
      engine::StepBatch b;
      for (int s = 0; s < batch; ++s) {
        engine::StepSequence seq;
        seq.tokens = {(s * 31 + i * 17) % 128000};
        seq.start_pos = context + i;
        seq.block_table = tables[s];
        b.sequences.push_back(std::move(seq));
      }
      const auto t0 = Clock::now();
      RETURN_IF_ERROR(model->Forward(b, &logits));  // ends with the logits download: synced
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (i >= warmup) {
        step_s.push_back(dt);
        kv_read += static_cast<double>(batch) * (context + i + 1) * kv_bytes_per_token;
      }
    }
    const double median = Median(step_s);
    const double bytes = static_cast<double>(model->weight_bytes() - embedding_bytes) +
                         static_cast<double>(batch) * d * 2 + kv_read / steps;
    const double tokens_per_s = batch / median;
    const double of_hbm = bytes / median / hbm_bps;
    const double of_copy = bytes / median / copy_bps;
    std::printf("%-6d %12.1f %12.3f %14.2f %9.1f%% %9.1f%%\n", batch, tokens_per_s, median * 1e3,
                bytes / 1e9, 100 * of_hbm, 100 * of_copy);
    results.push_back({{"batch", batch},
                       {"tokens_per_s", tokens_per_s},
                       {"step_ms_median", median * 1e3},
                       {"bytes_read_per_step", bytes},
                       {"fraction_of_hbm_limit", of_hbm},
                       {"fraction_of_measured_copy_bandwidth", of_copy}});
  }
  nlohmann::json out = {{"device", prop.name},
                        {"model", config.name},
                        {"weight_bytes", model->weight_bytes()},
                        {"kv_bytes", model->kv_bytes()},
                        {"context", context},
                        {"steps", steps},
                        {"create_seconds", create_s},
                        {"prefill_seconds", prefill_s},
                        {"prefill_tokens", static_cast<int64_t>(max_batch) * context},
                        {"hbm_limit_gbps", hbm_bps / 1e9},
                        {"measured_copy_gbps", copy_bps / 1e9},
                        {"results", results}};
  std::printf("weights %.2f GB, copy bandwidth %.0f GB/s (read + write), HBM limit %.0f GB/s\n",
              model->weight_bytes() / 1e9, copy_bps / 1e9, hbm_bps / 1e9);
  const std::string path = absl::GetFlag(FLAGS_json_out);
  if (!path.empty()) {
    std::ofstream f(path);
    f << out.dump(2) << "\n";
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpserve::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::cerr << "cuda_decode_throughput: no GPU visible to the CUDA driver\n";
    return 2;
  }
  const absl::Status status = tpserve::bench::Run();
  if (!status.ok()) {
    std::cerr << "cuda_decode_throughput: " << status << "\n";
    return 1;
  }
  return 0;
}
