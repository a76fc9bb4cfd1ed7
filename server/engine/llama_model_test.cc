// LlamaModel on the real SmolLM2-135M at world size 1: batching, paging and chunking must not
// change any sequence's logits. (Agreement with the independent numpy reference is checked
// by tests/integration/test_engine_reference.py.)
#include "server/engine/llama_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "server/engine/cpu_backend.h"

namespace tpserve::engine {
namespace {

constexpr char kModel[] = TPSERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr int64_t kBlocks = 256;

class LlamaModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto weights = model::OpenWeightSource(kModel);
    ASSERT_TRUE(weights.ok()) << weights.status() << " (run scripts/fetch-model.sh)";
    weights_ = std::move(*weights).release();
    auto plan = model::MakeShardPlan(weights_->config(), 0, 1);
    ASSERT_TRUE(plan.ok());
    backend_ = new CpuBackend(2);
    comm_ = new comm::SingleRankCommunicator();
    EngineOptions options;
    options.kv_blocks = kBlocks;
    options.max_batch_tokens = 256;
    auto m = LlamaModel::Load(*weights_, *plan, backend_, comm_, options);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete comm_;
    delete backend_;
    delete weights_;
  }

  // Token ids of a sequence: deterministic, spread over the vocabulary.
  static std::vector<int32_t> Tokens(int n, int salt) {
    std::vector<int32_t> t(n);
    for (int i = 0; i < n; ++i) t[i] = (1000 + 7919 * (i + 31 * salt)) % 49152;
    return t;
  }

  // Blocks [first, first + count).
  static std::vector<int32_t> Blocks(int32_t first, int32_t count) {
    std::vector<int32_t> b(count);
    std::iota(b.begin(), b.end(), first);
    return b;
  }

  static std::vector<float> Run(const StepBatch& batch) {
    std::vector<float> logits;
    absl::Status s = model_->Forward(batch, &logits);
    EXPECT_TRUE(s.ok()) << s;
    return logits;
  }

  static const model::WeightSource* weights_;
  static CpuBackend* backend_;
  static comm::SingleRankCommunicator* comm_;
  static LlamaModel* model_;
};

const model::WeightSource* LlamaModelTest::weights_ = nullptr;
CpuBackend* LlamaModelTest::backend_ = nullptr;
comm::SingleRankCommunicator* LlamaModelTest::comm_ = nullptr;
LlamaModel* LlamaModelTest::model_ = nullptr;

// max |a - b| / max |b|, and whether the two are bit-identical.
double RelDiff(const float* a, const float* b, int64_t n, bool* identical) {
  double diff = 0, scale = 0;
  *identical = true;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    if (a[i] != b[i]) *identical = false;
  }
  return diff / scale;
}

TEST_F(LlamaModelTest, BatchOfEightMixedPrefillAndDecodeEqualsEachAlone) {
  const int64_t vocab = model_->config().vocab_size;
  const std::vector<int> lengths = {1, 5, 17, 33, 2, 9, 48, 3};
  constexpr int32_t kPerSeq = 8;  // blocks per sequence: 128 positions
  // Alone: prefill, then one decode token, each sequence in its own blocks.
  std::vector<std::vector<float>> alone_prefill(8), alone_decode(8);
  for (int s = 0; s < 8; ++s) {
    StepSequence seq{Tokens(lengths[s], s), 0, Blocks(s * kPerSeq, kPerSeq)};
    alone_prefill[s] = Run({{seq}});
    seq = {{static_cast<int32_t>(100 + s)}, lengths[s], Blocks(s * kPerSeq, kPerSeq)};
    alone_decode[s] = Run({{seq}});
  }
  // Batched, in other blocks: step 1 prefills 0..3; step 2 decodes 0..3 while prefilling
  // 4..7; step 3 decodes 4..7.
  const int32_t base = 8 * kPerSeq;
  auto prefill = [&](int s) {
    return StepSequence{Tokens(lengths[s], s), 0, Blocks(base + s * kPerSeq, kPerSeq)};
  };
  auto decode = [&](int s) {
    return StepSequence{
        {static_cast<int32_t>(100 + s)}, lengths[s], Blocks(base + s * kPerSeq, kPerSeq)};
  };
  const std::vector<float> step1 = Run({{prefill(0), prefill(1), prefill(2), prefill(3)}});
  const std::vector<float> step2 = Run({{decode(0), prefill(4), decode(1), prefill(5), decode(2),
                                         prefill(6), decode(3), prefill(7)}});
  const std::vector<float> step3 = Run({{decode(4), decode(5), decode(6), decode(7)}});
  ASSERT_EQ(step1.size(), 4 * vocab);
  ASSERT_EQ(step2.size(), 8 * vocab);
  int identical_rows = 0;
  auto expect_row = [&](const std::vector<float>& got, int row, const std::vector<float>& want,
                        const char* what, int s) {
    bool identical = false;
    const double rel = RelDiff(got.data() + row * vocab, want.data(), vocab, &identical);
    EXPECT_LE(rel, 1e-4) << what << " of sequence " << s;
    identical_rows += identical;
  };
  for (int s = 0; s < 4; ++s) {
    expect_row(step1, s, alone_prefill[s], "prefill", s);
    expect_row(step2, 2 * s, alone_decode[s], "decode", s);
    expect_row(step2, 2 * s + 1, alone_prefill[4 + s], "prefill", 4 + s);
    expect_row(step3, s, alone_decode[4 + s], "decode", 4 + s);
  }
  std::cout << identical_rows << " of 16 rows bit-identical to the sequence run alone\n";
}

TEST_F(LlamaModelTest, ShuffledBlockTablesGiveTheLogitsOfContiguousBlocks) {
  const std::vector<int32_t> tokens = Tokens(70, 3);  // 5 blocks
  StepSequence contiguous{tokens, 0, Blocks(0, 5), true, true};
  const std::vector<float> want = Run({{contiguous}});
  std::vector<int32_t> shuffled = Blocks(100, 60);
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));
  shuffled.resize(5);
  StepSequence paged{tokens, 0, shuffled, true, true};
  const std::vector<float> got = Run({{paged}});
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got, want);  // the block a position lives in must not change any bit
  // And decoding on top of each cache agrees too.
  contiguous = {{42}, 70, Blocks(0, 5)};
  paged = {{42}, 70, shuffled};
  EXPECT_EQ(Run({{paged}}), Run({{contiguous}}));
}

TEST_F(LlamaModelTest, ChunkedPrefillEqualsOneShot) {
  const std::vector<int32_t> tokens = Tokens(45, 9);
  StepSequence whole{tokens, 0, Blocks(0, 3), true, true};
  const std::vector<float> want = Run({{whole}});
  const int64_t vocab = model_->config().vocab_size;
  std::vector<float> got;
  for (int begin = 0; begin < 45; begin += 7) {
    const int end = std::min(45, begin + 7);
    StepSequence chunk{
        {tokens.begin() + begin, tokens.begin() + end}, begin, Blocks(10, 3), true, true};
    const std::vector<float> part = Run({{chunk}});
    got.insert(got.end(), part.begin(), part.end());
  }
  ASSERT_EQ(got.size(), want.size());
  bool identical = false;
  EXPECT_LE(RelDiff(got.data(), want.data(), 45 * vocab, &identical), 1e-4);
}

TEST_F(LlamaModelTest, RefusesBadSteps) {
  std::vector<float> logits;
  StepBatch bad_token{{StepSequence{{49152}, 0, Blocks(0, 1)}}};
  absl::Status s = model_->Forward(bad_token, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("vocabulary"), std::string::npos) << s;

  StepBatch short_table{{StepSequence{Tokens(20, 1), 0, Blocks(0, 1)}}};
  s = model_->Forward(short_table, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block table"), std::string::npos) << s;

  StepBatch bad_block{{StepSequence{{1}, 0, {static_cast<int32_t>(kBlocks)}}}};
  EXPECT_EQ(model_->Forward(bad_block, &logits).code(), absl::StatusCode::kInvalidArgument);

  StepBatch too_long{{StepSequence{Tokens(300, 2), 0, Blocks(0, 20)}}};
  s = model_->Forward(too_long, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("256"), std::string::npos) << s;
}

// A synthetic model of a small Llama shape made in the backend: finite logits, the same for
// the same seed, different for another.
TEST(LlamaModelRandomTest, SyntheticWeightsGiveFiniteSeededLogits) {
  model::ModelConfig config;
  config.architecture = "llama";
  config.vocab_size = 320;
  config.d_model = 64;
  config.n_layers = 2;
  config.n_heads = 4;
  config.n_kv_heads = 2;
  config.head_dim = 16;
  config.ffn_dim = 96;
  config.context_length = 256;
  auto plan = model::MakeShardPlan(config, 0, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EngineOptions options;
  options.kv_blocks = 8;
  options.max_batch_tokens = 32;
  StepBatch batch;
  batch.sequences.push_back({{5, 17, 300, 2}, 0, {3}, true, false});
  auto logits_for = [&](uint64_t seed) {
    CpuBackend backend(1);
    comm::SingleRankCommunicator comm;
    auto m = LlamaModel::CreateRandom(config, *plan, &backend, &comm, options, seed);
    EXPECT_TRUE(m.ok()) << m.status();
    std::vector<float> logits;
    if (m.ok()) EXPECT_TRUE((*m)->Forward(batch, &logits).ok());
    return logits;
  };
  const std::vector<float> a = logits_for(1), b = logits_for(1), c = logits_for(2);
  ASSERT_EQ(a.size(), 320u);
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float v) { return std::isfinite(v); }));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_GT(*std::max_element(a.begin(), a.end()) - *std::min_element(a.begin(), a.end()), 0.1f);
}

}  // namespace
}  // namespace tpserve::engine
