// grammar_masks: the structured-output hot path on the real vocabulary. For every schema of
// a corpus (tests/schemas/corpus.json): its compile time (JSON schema -> GBNF -> grammar),
// then `walks` random generations through its grammar (each token drawn uniformly among
// those the mask allows, the way a decode step meets states: repeated ones from the cache),
// timing each token's mask. Batch 16 times one step's 16 masks (16 generations of the same
// schema side by side). Prints one JSON object: compile and mask times, p50 / p99, in µs.
//
//   grammar_masks MODEL.gguf CORPUS.json [walks=4] [tokens=96]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/grammar/compiled_grammar.h"
#include "server/grammar/token_constraint.h"
#include "server/model/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using tpserve::grammar::CompiledGrammar;
using tpserve::grammar::GrammarCache;
using tpserve::grammar::GrammarKind;
using tpserve::grammar::TokenConstraint;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

nlohmann::json Summary(const std::vector<double>& us) {
  return {{"count", us.size()}, {"p50_us", Percentile(us, 0.5)}, {"p99_us", Percentile(us, 0.99)}};
}

// A token the mask allows, drawn uniformly; -1 when none.
int32_t Draw(const std::string& mask, std::mt19937& rng) {
  std::vector<int32_t> allowed;
  for (size_t i = 0; i < mask.size() * 8; ++i) {
    if ((static_cast<unsigned char>(mask[i / 8]) >> (i % 8)) & 1) {
      allowed.push_back(static_cast<int32_t>(i));
    }
  }
  if (allowed.empty()) return -1;
  return allowed[rng() % allowed.size()];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.gguf CORPUS.json [walks] [tokens]\n", argv[0]);
    return 2;
  }
  const int walks = argc > 3 ? std::stoi(argv[3]) : 4;
  const int tokens = argc > 4 ? std::stoi(argv[4]) : 96;
  auto tokenizer = tpserve::model::Tokenizer::Load(argv[1]);
  if (!tokenizer.ok()) {
    fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  const tpserve::model::Tokenizer& tok = **tokenizer;
  std::vector<std::string> bytes;
  std::vector<bool> never;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    bytes.emplace_back(tok.TokenBytes(id));
    never.push_back(tok.IsSpecial(id) || id == tok.eos_id());
  }
  const auto trie_start = Clock::now();
  auto trie = std::make_shared<const tpserve::grammar::TokenTrie>(bytes, never, -1);
  const double trie_us = Micros(Clock::now() - trie_start);
  std::ifstream in(argv[2]);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json corpus = nlohmann::json::parse(text.str());

  std::vector<double> compile_us, mask1_us, step16_us;
  std::mt19937 rng(7);
  int refused = 0;
  for (const nlohmann::json& entry : corpus) {
    GrammarCache cache(trie);  // a cold cache: each schema compiles
    const auto start = Clock::now();
    auto compiled = cache.Get(GrammarKind::kJsonSchema, entry["schema"].dump());
    compile_us.push_back(Micros(Clock::now() - start));
    if (!compiled.ok()) {
      ++refused;
      continue;
    }
    const std::vector<int32_t> ends = {tok.eos_id()};
    for (int w = 0; w < walks; ++w) {  // batch 1: one generation at a time
      TokenConstraint c(*compiled, ends);
      std::string mask;
      for (int t = 0; t < tokens && !c.Ended(); ++t) {
        const auto m0 = Clock::now();
        if (!c.Mask(absl::InfiniteFuture(), &mask).ok()) break;
        mask1_us.push_back(Micros(Clock::now() - m0));
        const int32_t id = Draw(mask, rng);
        if (id < 0 || !c.Accept(id, tok.TokenBytes(id)).ok()) break;
      }
    }
    // Batch 16: sixteen generations of the schema, one mask each per step.
    std::vector<TokenConstraint> batch(16, TokenConstraint(*compiled, ends));
    std::vector<std::string> masks(16);
    for (int t = 0; t < tokens / 2; ++t) {
      const auto s0 = Clock::now();
      int live = 0;
      for (size_t b = 0; b < batch.size(); ++b) {
        if (batch[b].Ended()) continue;
        ++live;
        if (!batch[b].Mask(absl::InfiniteFuture(), &masks[b]).ok()) masks[b].clear();
      }
      if (live == 0) break;
      step16_us.push_back(Micros(Clock::now() - s0));
      for (size_t b = 0; b < batch.size(); ++b) {
        if (batch[b].Ended() || masks[b].empty()) continue;
        const int32_t id = Draw(masks[b], rng);
        if (id >= 0) (void)batch[b].Accept(id, tok.TokenBytes(id));
      }
    }
  }
  const nlohmann::json out = {
      {"vocab", tok.vocab_size()},
      {"trie_nodes", trie->nodes()},
      {"trie_build_us", trie_us},
      {"schemas", corpus.size()},
      {"refused", refused},
      {"compile", Summary(compile_us)},
      {"mask_batch1", Summary(mask1_us)},
      {"mask_step_batch16", Summary(step16_us)},
  };
  printf("%s\n", out.dump(2).c_str());
  return 0;
}
