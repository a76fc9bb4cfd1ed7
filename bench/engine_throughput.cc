// engine_throughput: tokens per second of LlamaModel at world size 1 on this machine.
//   engine_throughput MODEL THREADS [PROMPT_TOKENS=128] [DECODE_STEPS=32] [BATCHES=1,8,32]
//                     [WEIGHTS=packed|packed-float|exact] [REPS=3]
// Prints one JSON object: prefill tokens/s for one prompt of PROMPT_TOKENS, and for each
// batch size B the total decode tokens/s of B sequences decoding together (each after its
// own prompt of 16 tokens), medians over REPS repetitions, plus the bytes of weights one decode
// step reads (the file's blocks when packed, f32 when exact: --dequantize; packed sums the
// row-parallel projections exactly, the canonical path, packed-float in float, as before it).
// And speculative verification's cost: one sequence computing 1 + K positions in a step with
// the logits of each (K = 1, 2, 4, 8), as a ratio to its plain decode step (K = 0). Also the
// process's peak RSS and the load time. bench/engine_vs_llama_cpp.py runs it side by side with
// llama.cpp.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/kv_block.h"
#include "nlohmann/json.hpp"
#include "server/comm/communicator.h"
#include "server/engine/cpu_backend.h"
#include "server/engine/llama_model.h"
#include "server/model/plan/shard_plan.h"
#include "server/model/weights/weight_source.h"

namespace {

using tpserve::engine::StepBatch;
using tpserve::engine::StepSequence;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int64_t ArgOr(int argc, char** argv, int i, int64_t fallback) {
  int64_t v = fallback;
  if (argc > i && !absl::SimpleAtoi(argv[i], &v)) return fallback;
  return v;
}

int Run(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: engine_throughput MODEL THREADS [PROMPT] [STEPS] [BATCHES] [WEIGHTS] "
                 "[REPS]\n";
    return 2;
  }
  const int threads = static_cast<int>(ArgOr(argc, argv, 2, 1));
  const int64_t prompt_len = ArgOr(argc, argv, 3, 128);
  const int64_t steps = ArgOr(argc, argv, 4, 32);
  std::vector<int64_t> batches = {1, 8, 32};
  if (argc > 5) {
    batches.clear();
    for (absl::string_view b : absl::StrSplit(argv[5], ',')) {
      int64_t v = 0;
      if (absl::SimpleAtoi(b, &v) && v > 0) batches.push_back(v);
    }
  }
  if (batches.empty()) {
    std::cerr << "BATCHES must list positive batch sizes\n";
    return 2;
  }
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  const std::string weights_mode = argc > 6 ? argv[6] : "packed";
  if (weights_mode != "packed" && weights_mode != "packed-float" && weights_mode != "exact") {
    std::cerr << "WEIGHTS is packed, packed-float or exact, not " << weights_mode << "\n";
    return 1;
  }
  const int64_t reps = ArgOr(argc, argv, 7, 3);
  if (reps < 1) {
    std::cerr << "REPS must be at least 1\n";
    return 2;
  }
  const auto load_start = std::chrono::steady_clock::now();

  auto weights = tpserve::model::OpenWeightSource(argv[1]);
  if (!weights.ok()) {
    std::cerr << weights.status() << "\n";
    return 1;
  }
  const auto& config = (*weights)->config();
  auto plan = tpserve::model::MakeShardPlan(config, 0, 1);
  if (!plan.ok()) {
    std::cerr << plan.status() << "\n";
    return 1;
  }
  tpserve::engine::CpuBackend backend(threads);
  tpserve::comm::SingleRankCommunicator comm;
  tpserve::engine::EngineOptions options;
  options.max_batch_tokens = std::max<int64_t>(prompt_len, 16 * max_batch);
  options.max_logit_rows = std::max<int64_t>(max_batch, 9);
  const int64_t blocks_per_seq =
      (std::max<int64_t>(prompt_len, 16 + 9 * steps) + tpserve::kKvBlockSize - 1) /
      tpserve::kKvBlockSize;
  options.kv_blocks = blocks_per_seq * max_batch;
  options.dequantize = weights_mode == "exact";
  options.tp_invariant = weights_mode != "packed-float";
  auto model = tpserve::engine::LlamaModel::Load(**weights, *plan, &backend, &comm, options);
  if (!model.ok()) {
    std::cerr << model.status() << "\n";
    return 1;
  }
  auto table = [&](int64_t s) {
    std::vector<int32_t> t(blocks_per_seq);
    std::iota(t.begin(), t.end(), static_cast<int32_t>(s * blocks_per_seq));
    return t;
  };
  auto tokens = [&](int64_t n, int64_t salt) {
    std::vector<int32_t> t(n);
    for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((1000 + 7919 * (i + salt)) % 49152);
    return t;
  };
  std::vector<float> logits;
  auto run = [&](const StepBatch& b) {
    absl::Status s = (*model)->Forward(b, &logits);
    if (!s.ok()) {
      std::cerr << s << "\n";
      std::exit(1);
    }
  };

  nlohmann::json out;
  out["threads"] = threads;
  out["weights"] = weights_mode;
  out["weight_bytes"] = (*model)->weight_bytes();
  out["exact_sums"] = (*model)->exact_sums();
  out["load_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  // One decode step reads every matrix once: the layers and the LM head (the embedding
  // table is touched only at the rows of the step's tokens), as stored (packed) or as f32.
  int64_t decode_bytes = 0;
  auto add = [&](const std::string& name) {
    const auto shape = (*weights)->Shape(name);
    const auto type = (*weights)->StoredType(name);
    if (!shape.ok() || !type.ok()) return;
    decode_bytes += weights_mode == "exact"
                        ? shape->rows * shape->cols * 4
                        : shape->rows * (shape->cols / type->block_values) * type->block_bytes;
  };
  for (int64_t l = 0; l < config.n_layers; ++l) {
    for (const char* m :
         {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
      add("blk." + std::to_string(l) + "." + m + ".weight");
    }
  }
  add(config.tied_embeddings ? "token_embd.weight" : "output.weight");
  out["decode_bytes_per_step"] = decode_bytes;

  std::vector<double> prefill;
  for (int64_t rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    run({{StepSequence{tokens(prompt_len, rep), 0, table(0)}}});
    prefill.push_back(static_cast<double>(prompt_len) /
                      std::chrono::duration<double>(Clock::now() - t0).count());
  }
  out["prefill_tokens"] = prompt_len;
  out["reps"] = reps;
  out["prefill_tok_s"] = Median(prefill);

  for (int64_t b : batches) {
    std::vector<double> rates;
    for (int64_t rep = 0; rep < reps; ++rep) {
      StepBatch batch;
      for (int64_t s = 0; s < b; ++s) batch.sequences.push_back({tokens(16, s), 0, table(s)});
      run(batch);
      const auto t0 = Clock::now();
      for (int64_t step = 0; step < steps; ++step) {
        for (int64_t s = 0; s < b; ++s) {
          batch.sequences[s] = {
              {static_cast<int32_t>(100 + s)}, static_cast<int32_t>(16 + step), table(s)};
        }
        run(batch);
      }
      rates.push_back(static_cast<double>(b * steps) /
                      std::chrono::duration<double>(Clock::now() - t0).count());
    }
    out["decode_tok_s"][std::to_string(b)] = Median(rates);
  }
  // Verification: one sequence, 1 + K new positions, every one's logits, at the same
  // contexts whatever K (step s at position 16 + 9s, over a cache prefilled that far).
  double plain_step_s = 0;
  for (int64_t k : {0, 1, 2, 4, 8}) {
    std::vector<double> walls;
    for (int64_t rep = 0; rep < reps; ++rep) {
      for (int64_t pos = 0; pos < 16 + 9 * steps; pos += options.max_batch_tokens) {
        const int64_t n = std::min<int64_t>(options.max_batch_tokens, 16 + 9 * steps - pos);
        StepSequence chunk{tokens(n, pos), static_cast<int32_t>(pos), table(0)};
        chunk.want_logits = false;
        run({{chunk}});
      }
      const auto t0 = Clock::now();
      for (int64_t step = 0; step < steps; ++step) {
        StepSequence seq{tokens(1 + k, step), static_cast<int32_t>(16 + 9 * step), table(0)};
        seq.all_logits = true;
        run({{seq}});
      }
      walls.push_back(std::chrono::duration<double>(Clock::now() - t0).count() /
                      static_cast<double>(steps));
    }
    if (k == 0) plain_step_s = Median(walls);
    out["verify_step_over_plain"][std::to_string(k)] = Median(walls) / plain_step_s;
  }
  out["plain_step_s"] = plain_step_s;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  out["peak_rss_bytes"] = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {  // bad_alloc and the like: report, never escape
    std::cerr << "engine_throughput: " << e.what() << "\n";
    return 1;
  }
}
