// Tokenizer throughput on a mixed-text corpus with the SmolLM2 tokenizer: encode and decode
// MB/s (bytes of text per second), plus streaming (IncrementalDecoder) decode.
// The corpus is JSON lines written by bench/corpus.py (bench/tokenizer_hf.py writes it and
// measures Hugging Face tokenizers on the same file); its path is $TPSERVE_TOKENIZER_CORPUS,
// default /tmp/tpserve_tokenizer_corpus.jsonl.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/model/tokenizer/incremental_decoder.h"
#include "server/model/tokenizer/tokenizer.h"

namespace {

using tpserve::model::Tokenizer;

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
  size_t bytes = 0;
  std::string error;
};

const Fixture& Get() {
  static const Fixture* fixture = [] {
    auto* f = new Fixture();
    const std::string model =
        std::string(TPSERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    auto tok = Tokenizer::Load(model);
    if (!tok.ok()) {
      f->error = std::string{tok.status().message()};
      return f;
    }
    f->tokenizer = std::move(*tok);
    const char* env = std::getenv("TPSERVE_TOKENIZER_CORPUS");
    const std::string path = env != nullptr ? env : "/tmp/tpserve_tokenizer_corpus.jsonl";
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      auto value = nlohmann::json::parse(line, nullptr, false);
      if (value.is_string()) f->texts.push_back(value.get<std::string>());
    }
    if (f->texts.empty()) {
      f->error = path + " is missing or empty: run python bench/tokenizer_hf.py first";
      return f;
    }
    for (const auto& t : f->texts) {
      f->bytes += t.size();
      f->ids.push_back(*f->tokenizer->Encode(t, false));
    }
    return f;
  }();
  return *fixture;
}

void BM_Encode(benchmark::State& state) {
  const Fixture& f = Get();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  for (auto _ : state) {
    for (const auto& t : f.texts) benchmark::DoNotOptimize(f.tokenizer->Encode(t, false));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f.bytes));
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  const Fixture& f = Get();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  for (auto _ : state) {
    for (const auto& ids : f.ids) benchmark::DoNotOptimize(f.tokenizer->Decode(ids, false));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f.bytes));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

void BM_DecodeStreaming(benchmark::State& state) {
  const Fixture& f = Get();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  for (auto _ : state) {
    for (const auto& ids : f.ids) {
      tpserve::model::IncrementalDecoder decoder(*f.tokenizer, false);
      for (int32_t id : ids) benchmark::DoNotOptimize(decoder.Feed(id));
      benchmark::DoNotOptimize(decoder.Flush());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f.bytes));
}
BENCHMARK(BM_DecodeStreaming)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
