// Tensor parallelism end to end on the real SmolLM2-135M (9 query heads, 3 KV heads): worlds
// of 2, 3 and 4 ranks, threads of one process, each rank with its own CpuBackend, its own
// shard of the weights and a Gloo communicator on 127.0.0.1, must reproduce the world of one:
// the logits of mixed prefill/decode steps within 1e-4 (relative to the row's largest logit)
// on every rank, and greedy continuations token for token. P = 2 splits the heads unevenly
// (6+3 query heads, 2+1 KV heads); P = 4 replicates KV heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/store.h"
#include "server/engine/cpu_backend.h"
#include "server/engine/llama_model.h"
#include "server/model/shard_plan.h"
#include "server/model/weight_source.h"

namespace tpserve::engine {
namespace {

constexpr char kModel[] = TPSERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr int32_t kBlocksPerSeq = 4;  // 64 positions
constexpr int kGreedyTokens = 32;
constexpr int kPrompts = 4;

// Token ids of a sequence: deterministic, spread over the vocabulary.
std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (1000 + 7919 * (i + 31 * salt)) % 49152;
  return t;
}

// The KV blocks of sequence `s`.
std::vector<int32_t> Blocks(int s) {
  std::vector<int32_t> b(kBlocksPerSeq);
  std::iota(b.begin(), b.end(), s * kBlocksPerSeq);
  return b;
}

// What one rank saw.
struct RankResult {
  absl::Status status;
  std::vector<std::vector<float>> step_logits;  // per step: [rows, vocab]
  std::vector<std::vector<int32_t>> greedy;     // per prompt: kGreedyTokens generated ids
  int64_t weight_bytes = 0;
};

// The steps every world runs, in lockstep on every rank: two prefills (one wanting the
// logits of every prompt token), then their decodes batched with a third prefill, then
// decodes only.
std::vector<StepBatch> MixedSteps() {
  StepSequence a{Tokens(13, 1), 0, Blocks(0), true, /*all_logits=*/true};
  StepSequence b{Tokens(6, 2), 0, Blocks(1)};
  StepSequence a1{{4242}, 13, Blocks(0)};
  StepSequence b1{{77}, 6, Blocks(1), true, /*all_logits=*/true};
  StepSequence c{Tokens(9, 3), 0, Blocks(2), true, /*all_logits=*/true};
  StepSequence a2{{123}, 14, Blocks(0)};
  StepSequence c1{{31000}, 9, Blocks(2)};
  return {StepBatch{{a, b}}, StepBatch{{a1, c, b1}}, StepBatch{{c1, a2}}};
}

absl::Status RunRank(const model::WeightSource& weights, comm::Store* store, int rank, int world,
                     RankResult* out) {
  auto plan = model::MakeShardPlan(weights.config(), rank, world);
  if (!plan.ok()) return plan.status();
  comm::GlooOptions options;
  options.prefix = absl::StrCat("tp", world, "/");
  options.timeout = absl::Seconds(60);
  auto comm = comm::CreateGlooCommunicator(store, rank, world, options);
  if (!comm.ok()) return comm.status();
  CpuBackend backend(1);
  EngineOptions engine_options;
  engine_options.kv_blocks = 16 * kBlocksPerSeq;
  engine_options.max_batch_tokens = 64;
  auto model = LlamaModel::Load(weights, *plan, &backend, comm->get(), engine_options);
  if (!model.ok()) return model.status();
  out->weight_bytes = (*model)->weight_bytes();

  for (const StepBatch& step : MixedSteps()) {
    std::vector<float> logits;
    if (absl::Status s = (*model)->Forward(step, &logits); !s.ok()) return s;
    out->step_logits.push_back(std::move(logits));
  }

  // Greedy continuations of kPrompts prompts, batched, in blocks no step above used.
  const int64_t vocab = weights.config().vocab_size;
  std::vector<StepSequence> seqs(kPrompts);
  for (int p = 0; p < kPrompts; ++p) {
    seqs[p] = {Tokens(3 + 4 * p, 10 + p), 0, Blocks(4 + p)};
  }
  out->greedy.assign(kPrompts, {});
  for (int t = 0; t < kGreedyTokens; ++t) {
    std::vector<float> logits;
    if (absl::Status s = (*model)->Forward(StepBatch{seqs}, &logits); !s.ok()) return s;
    for (int p = 0; p < kPrompts; ++p) {
      const float* row = logits.data() + p * vocab;
      const int32_t next = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      out->greedy[p].push_back(next);
      seqs[p].start_pos += static_cast<int32_t>(seqs[p].tokens.size());
      seqs[p].tokens = {next};
    }
  }
  return absl::OkStatus();
}

class TensorParallelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto weights = model::OpenWeightSource(kModel);
    ASSERT_TRUE(weights.ok()) << weights.status() << " (run scripts/fetch-model.sh)";
    weights_ = std::move(*weights).release();
  }
  static void TearDownTestSuite() {
    delete weights_;
    weights_ = nullptr;
    results_.clear();
  }

  // The world of `world` ranks, run once and remembered.
  static const std::vector<RankResult>& World(int world) {
    auto it = results_.find(world);
    if (it != results_.end()) return it->second;
    std::vector<RankResult> ranks(world);
    comm::InMemoryStore store;
    const absl::Time start = absl::Now();
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back(
          [&, r] { ranks[r].status = RunRank(*weights_, &store, r, world, &ranks[r]); });
    }
    for (std::thread& t : threads) t.join();
    std::printf("world of %d: %.1f s\n", world, absl::ToDoubleSeconds(absl::Now() - start));
    return results_[world] = std::move(ranks);
  }

  // Every rank of `world` against rank 0 of the world of one.
  static void ExpectMatchesWorldOfOne(int world) {
    const std::vector<RankResult>& ref = World(1);
    ASSERT_TRUE(ref[0].status.ok()) << ref[0].status;
    const std::vector<RankResult>& got = World(world);
    const int64_t vocab = weights_->config().vocab_size;
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(got[r].status.ok()) << "rank " << r << ": " << got[r].status;
      ASSERT_EQ(got[r].step_logits.size(), ref[0].step_logits.size());
      double worst = 0;
      for (size_t s = 0; s < ref[0].step_logits.size(); ++s) {
        const std::vector<float>& want = ref[0].step_logits[s];
        const std::vector<float>& have = got[r].step_logits[s];
        ASSERT_EQ(have.size(), want.size()) << "step " << s;
        for (size_t row = 0; row < want.size() / vocab; ++row) {
          double diff = 0, scale = 0;
          for (int64_t i = 0; i < vocab; ++i) {
            diff = std::max(diff, std::fabs(double{have[row * vocab + i]} - want[row * vocab + i]));
            scale = std::max(scale, std::fabs(double{want[row * vocab + i]}));
          }
          worst = std::max(worst, diff / scale);
          EXPECT_LE(diff / scale, 1e-4)
              << "world " << world << ", rank " << r << ", step " << s << ", row " << row;
        }
      }
      std::printf("world of %d, rank %d: worst relative logit difference %.2e\n", world, r, worst);
      for (int p = 0; p < kPrompts; ++p) {
        EXPECT_EQ(got[r].greedy[p], ref[0].greedy[p])
            << "world " << world << ", rank " << r << ", prompt " << p;
      }
    }
  }

  static const model::WeightSource* weights_;
  static std::map<int, std::vector<RankResult>> results_;
};

const model::WeightSource* TensorParallelTest::weights_ = nullptr;
std::map<int, std::vector<RankResult>> TensorParallelTest::results_;

TEST_F(TensorParallelTest, WorldOfTwoMatchesWorldOfOne) { ExpectMatchesWorldOfOne(2); }
TEST_F(TensorParallelTest, WorldOfThreeMatchesWorldOfOne) { ExpectMatchesWorldOfOne(3); }
TEST_F(TensorParallelTest, WorldOfFourMatchesWorldOfOne) { ExpectMatchesWorldOfOne(4); }

TEST_F(TensorParallelTest, ShardingDividesTheWeightMemory) {
  const model::ModelConfig& c = weights_->config();
  const int64_t f32 = sizeof(float);
  const int64_t embedding = c.vocab_size * c.d_model * f32;      // [vocab, d] replicated
  const int64_t norms = (2 * c.n_layers + 1) * c.d_model * f32;  // [1, d] each
  const int64_t replicated = embedding + norms;
  std::printf("%-6s %-5s %14s %14s %14s\n", "world", "rank", "weight_bytes", "sharded", "layers");
  std::map<int, int64_t> max_sharded, max_layers;
  for (int world = 1; world <= 3; ++world) {
    const std::vector<RankResult>& ranks = World(world);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(ranks[r].status.ok()) << ranks[r].status;
      auto plan = model::MakeShardPlan(c, r, world);
      ASSERT_TRUE(plan.ok());
      // With tied embeddings the world of one reads its LM head from the embedding table.
      const int64_t lm_head = (c.tied_embeddings && world == 1)
                                  ? 0
                                  : plan->vocab.size() * c.d_model * f32;  // [vocab_local, d]
      const int64_t sharded = ranks[r].weight_bytes - replicated;
      const int64_t layers = sharded - lm_head;
      std::printf("%-6d %-5d %14lld %14lld %14lld\n", world, r,
                  static_cast<long long>(ranks[r].weight_bytes), static_cast<long long>(sharded),
                  static_cast<long long>(layers));
      max_sharded[world] = std::max(max_sharded[world], sharded);
      max_layers[world] = std::max(max_layers[world], layers);
    }
  }
  // The layer matrices of the busiest rank at P = 2 (6 of 9 query heads, 2 of 3 KV heads,
  // half the FFN) are at most 60% of the whole.
  EXPECT_LE(max_layers[2], 0.6 * max_layers[1]);
  // Counting the LM head too: at P = 1 a tied head costs nothing extra (it is the embedding),
  // at P = 2 each rank holds its half; against the head's logical size at P = 1, still <= 60%.
  const int64_t tied_head = c.tied_embeddings ? embedding : 0;
  EXPECT_LE(max_sharded[2], 0.6 * (max_sharded[1] + tied_head));
  std::printf(
      "P=2 busiest rank / P=1: layers %.1f%%, layers + LM head %.1f%% (%.1f%% against "
      "P=1 without its tied head)\n",
      100.0 * max_layers[2] / max_layers[1], 100.0 * max_sharded[2] / (max_sharded[1] + tied_head),
      100.0 * max_sharded[2] / max_sharded[1]);
}

}  // namespace
}  // namespace tpserve::engine
