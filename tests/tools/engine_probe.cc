// engine_probe: drives LlamaModel (world size 1, CPU) for the pytest suites that compare it
// with the numpy reference. Reads one JSON array of token ids per stdin line. WEIGHTS is
// "packed" (the default: the file's blocks, the fast path) or "exact" (dequantised to f32,
// --dequantize).
//   engine_probe MODEL logits OUT.f32 [THREADS [WEIGHTS]]
//       every position's logits of every line, appended to OUT.f32 as [T, vocab] f32;
//       prints {"rows": T} per line.
//   engine_probe MODEL greedy MAX_TOKENS [THREADS [WEIGHTS]]
//       greedy continuations of all lines, decoded together as one batch (a sequence stops
//       after emitting EOS, which is kept); prints a JSON array of ids per line.
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/kv_block.h"
#include "nlohmann/json.hpp"
#include "server/comm/communicator.h"
#include "server/engine/cpu_backend.h"
#include "server/engine/llama_model.h"
#include "server/engine/sampler.h"
#include "server/model/plan/shard_plan.h"
#include "server/model/weights/weight_source.h"

namespace {

using tpserve::engine::StepBatch;
using tpserve::engine::StepSequence;

int Fail(const std::string& what) {
  std::cerr << "engine_probe: " << what << "\n";
  return 1;
}

// The token ids of one input line's JSON array, converted as json::get<std::vector<int32_t>>()
// would (numbers and booleans cast to int32_t) but without throwing: false when `j` is not an
// array or holds anything else.
bool ToTokenIds(const nlohmann::json& j, std::vector<int32_t>* ids) {
  using json = nlohmann::json;
  const auto* array = j.get_ptr<const json::array_t*>();
  if (array == nullptr) return false;
  ids->clear();
  ids->reserve(array->size());
  for (const json& v : *array) {
    if (const auto* u = v.get_ptr<const json::number_unsigned_t*>()) {
      ids->push_back(static_cast<int32_t>(*u));
    } else if (const auto* i = v.get_ptr<const json::number_integer_t*>()) {
      ids->push_back(static_cast<int32_t>(*i));
    } else if (const auto* f = v.get_ptr<const json::number_float_t*>()) {
      ids->push_back(static_cast<int32_t>(*f));
    } else if (const auto* b = v.get_ptr<const json::boolean_t*>()) {
      ids->push_back(static_cast<int32_t>(*b));
    } else {
      return false;
    }
  }
  return true;
}

int Probe(int argc, char** argv) {
  if (argc < 4) {
    return Fail("usage: engine_probe MODEL logits OUT.f32 | greedy N [THREADS [exact|packed]]");
  }
  const std::string mode = argv[2];
  int threads = 2;
  if (argc > 4 && !absl::SimpleAtoi(argv[4], &threads)) {
    return Fail(absl::StrCat("THREADS is not an integer: ", argv[4]));
  }
  const std::string weights_mode = argc > 5 ? argv[5] : "packed";
  if (weights_mode != "exact" && weights_mode != "packed") {
    return Fail(absl::StrCat("WEIGHTS is exact or packed, not ", weights_mode));
  }
  std::vector<std::vector<int32_t>> prompts;
  for (std::string line; std::getline(std::cin, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    std::vector<int32_t> ids;
    if (j.is_discarded() || !ToTokenIds(j, &ids)) return Fail("bad input line: " + line);
    prompts.push_back(std::move(ids));
  }
  auto weights = tpserve::model::OpenWeightSource(argv[1]);
  if (!weights.ok()) return Fail(weights.status().ToString());
  const auto& config = (*weights)->config();
  auto plan = tpserve::model::MakeShardPlan(config, 0, 1);
  if (!plan.ok()) return Fail(plan.status().ToString());
  tpserve::engine::CpuBackend backend(threads);
  tpserve::comm::SingleRankCommunicator comm;
  tpserve::engine::EngineOptions options;
  options.max_batch_tokens = 4096;
  options.max_logit_rows = 1024;
  options.dequantize = weights_mode == "exact";
  int64_t max_new = 0;
  if (mode == "greedy" && !absl::SimpleAtoi(argv[3], &max_new)) {
    return Fail(absl::StrCat("MAX_TOKENS is not an integer: ", argv[3]));
  }
  const int64_t blocks_per_seq =
      (1024 + max_new + tpserve::kKvBlockSize - 1) / tpserve::kKvBlockSize;
  options.kv_blocks = blocks_per_seq * static_cast<int64_t>(std::max<size_t>(prompts.size(), 1));
  auto model = tpserve::engine::LlamaModel::Load(**weights, *plan, &backend, &comm, options);
  if (!model.ok()) return Fail(model.status().ToString());

  auto table = [&](size_t s) {
    std::vector<int32_t> b(blocks_per_seq);
    std::iota(b.begin(), b.end(), static_cast<int32_t>(s * blocks_per_seq));
    return b;
  };
  std::vector<float> logits;
  if (mode == "logits") {
    std::ofstream out(argv[3], std::ios::binary);
    for (size_t s = 0; s < prompts.size(); ++s) {
      StepBatch batch{{StepSequence{prompts[s], 0, table(s), true, true}}};
      if (auto st = (*model)->Forward(batch, &logits); !st.ok()) return Fail(st.ToString());
      out.write(reinterpret_cast<const char*>(logits.data()),
                static_cast<std::streamsize>(logits.size() * sizeof(float)));
      std::cout << nlohmann::json({{"rows", prompts[s].size()}}).dump() << std::endl;
    }
    return out.good() ? 0 : Fail("cannot write the logits file");
  }
  if (mode != "greedy") return Fail("unknown mode " + mode);

  tpserve::engine::Sampler sampler;
  tpserve::engine::SamplingParams greedy;
  greedy.temperature = 0.0f;
  const int64_t vocab = config.vocab_size;
  const int32_t eos = config.eos_token_ids.empty() ? -1 : config.eos_token_ids[0];
  std::vector<std::vector<int32_t>> generated(prompts.size());
  std::vector<bool> done(prompts.size(), false);
  StepBatch batch;
  std::vector<size_t> order;  // sequence of each batch entry
  for (size_t s = 0; s < prompts.size(); ++s) {
    batch.sequences.push_back({prompts[s], 0, table(s)});
    order.push_back(s);
  }
  while (!batch.sequences.empty()) {
    if (auto st = (*model)->Forward(batch, &logits); !st.ok()) return Fail(st.ToString());
    StepBatch next;
    std::vector<size_t> next_order;
    for (size_t i = 0; i < order.size(); ++i) {
      const size_t s = order[i];
      const int32_t token =
          sampler.Sample({logits.data() + i * vocab, static_cast<size_t>(vocab)}, greedy, {}, 0)
              .token_id;
      generated[s].push_back(token);
      if (token == eos || static_cast<int64_t>(generated[s].size()) == max_new) continue;
      const auto pos = static_cast<int32_t>(prompts[s].size() + generated[s].size() - 1);
      next.sequences.push_back({{token}, pos, table(s)});
      next_order.push_back(s);
    }
    batch = std::move(next);
    order = std::move(next_order);
  }
  for (const auto& g : generated) std::cout << nlohmann::json(g).dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Probe(argc, argv);
  } catch (const std::exception& e) {  // bad_alloc and the like: report, never escape
    return Fail(e.what());
  }
}
