// Tensor parallelism end to end on the real SmolLM2-135M (9 query heads, 3 KV heads): worlds
// of 2, 3 and 4 ranks, threads of one process, each rank with its own CpuBackend, its own
// shard of the weights and a shared-memory communicator (and, at P = 2, Gloo on 127.0.0.1
// too), must reproduce the world of one. With exact (dequantised f32) weights: the logits of
// mixed prefill/decode steps within 1e-4 (relative to the row's largest logit) on rank 0,
// which alone receives them, and greedy 64-token continuations of 16 prompts, decoded as one
// batch, token for token. Shared memory and Gloo give the same bits at P = 2. P = 2 splits the
// heads unevenly (6+3 query heads, 2+1 KV heads); P = 4 replicates KV heads.
//
// With the file's blocks kept (the default, fast path), the row-parallel projections are exact
// fixed-point sums (the canonical path, kernels/cpu/quant/fixed_sum.h): every world, at one
// thread or two, gives the world of one's logits bit for bit, and its greedy tokens. With float
// sums instead (tp_invariant off), activations rounded to 8 bits per block of 32 before each
// matmul turn the last-bit differences of a split sum into quantisation noise: logits agree to
// it, and a greedy continuation may part only where the world of one's top two nearly tie.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/shm/shm_communicator.h"
#include "server/comm/store.h"
#include "server/engine/cpu_backend.h"
#include "server/engine/llama_model.h"
#include "server/engine/sampler.h"
#include "server/model/plan/shard_plan.h"
#include "server/model/weights/weight_source.h"

namespace tpserve::engine {
namespace {

constexpr char kModel[] = TPSERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr int32_t kBlocksPerSeq = 8;  // 128 positions: the longest prompt (60) + 64 tokens
constexpr int kGreedyTokens = 64;
constexpr int32_t kEos = 2;    // <|im_end|>
constexpr int kMixedSeqs = 3;  // sequences of MixedSteps(), in blocks of sequences 0..2

// The greedy prompts: SmolLM2 token ids of real text, 3 to 60 tokens, every length different;
// plain text, code, a list, questions and chat-template prompts (which tend to end with EOS).
const std::vector<std::vector<int32_t>>& Prompts() {
  static const auto* prompts = new std::vector<std::vector<int32_t>>{
      // "Hello, my"
      {19556, 28, 957},
      // "The capital of France is"
      {504, 3575, 282, 4649, 314},
      // "Once upon a time, in a small village nestled between the mountains, there lived an old"
      {6403, 1980, 253, 655, 28, 281, 253, 1165, 6560, 32047, 826, 260, 8718, 28, 665, 4161, 354,
       1573},
      // "def fibonacci(n):\n    "
      {1604, 3987, 46477, 24, 94, 727, 2367},
      // "Water boils at 100 degrees Celsius at sea level. At higher altitudes, the boiling point"
      {12615, 36411, 418, 216,  33,   32,    32, 5027, 20590, 418,
       3426,  1106,  30,  1814, 2061, 29326, 28, 260,  16891, 1225},
      // "The colours of the rainbow are"
      {504, 14797, 282, 260, 24594, 359},
      // "Photosynthesis is the process by which green plants and some other organisms use
      // sunlight to synthesize foods from carbon dioxide and water. In plants, photosynthesis
      // generally involves the green pigment chlorophyll and generates oxygen as a byproduct.
      // The light-dependent reactions take place in the thylakoid membranes, while the Calvin
      // cycle"
      {33580, 14870, 314,  260,   980,   411,  527,   2654, 2109,  284,   634,   550,
       6896,  722,   8118, 288,   30782, 3111, 429,   3118, 7600,  284,   913,   30,
       533,   2109,  28,   19173, 3178,  3445, 260,   2654, 20864, 29677, 284,   13313,
       4983,  347,   253,  39677, 30,    378,  1420,  29,   15566, 6620,  1188,  1379,
       281,   260,   295,  2668,  494,   1633, 16397, 28,   979,   260,   24690, 4834},
      // "1, 2, 3, 4, 5,"
      {33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28},
      // "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
      {1, 4093, 198, 1780, 314, 216, 34, 27, 34, 47, 2, 198, 1, 520, 9531, 198},
      // "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging
      // Face<|im_end|>\n<|im_start|>user\nName three fruits that are red.<|im_end|>\n
      // <|im_start|>assistant\n"
      {1,    9690, 198, 2683, 359,   253,  5356, 5646, 11173, 3365, 3511, 308,  34519,
       28,   7018, 411, 407,  19712, 8182, 2,    198,  1,     4093, 198,  5820, 1296,
       5574, 338,  359, 2382, 30,    2,    198,  1,    520,   9531, 198},
      // "The quick brown fox"
      {504, 2365, 6354, 16438},
      // "In 1969, Neil Armstrong became the first person to walk on the Moon. The Apollo 11
      // mission"
      {788, 216,  33,  41,  38,   41, 28,  27639, 24955, 2163, 260, 808, 1055,
       288, 4549, 335, 260, 8872, 30, 378, 17600, 216,   33,   33,  4527},
      // "Q: Why is the sky blue?\nA:"
      {65, 42, 4896, 314, 260, 6376, 4461, 47, 198, 49, 42},
      // "Dear hiring manager, I am writing to apply for the position of software engineer at
      // your company. I have five years of experience building distributed systems, and"
      {35097, 16303, 8864, 28, 339, 744, 2385, 288, 3777, 327,  260,  2548, 282,  3197, 10776,
       418,   469,   2727, 30, 339, 457, 2531, 929, 282,  1786, 2194, 6636, 1734, 28,   284},
      // "import numpy as np\nx = np.linspace(0, 1, 100)\ny ="
      {2017, 6772, 347, 2333, 198, 104, 446, 2333, 30, 26916, 24,  32,
       28,   216,  33,  28,   216, 33,  32,  32,   25, 198,   105, 446},
      // "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n"
      {1, 4093, 198, 19161, 253, 421, 30614, 563, 260, 3426, 30, 2, 198, 1, 520, 9531, 198},
  };
  return *prompts;
}

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

// max |have - want| over logit row `row` (of `vocab` columns), relative to max |want| there.
double RelativeRowDifference(const std::vector<float>& have, const std::vector<float>& want,
                             size_t row, int64_t vocab) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    diff = std::max(diff, std::fabs(double{have[row * vocab + i]} - want[row * vocab + i]));
    scale = std::max(scale, std::fabs(double{want[row * vocab + i]}));
  }
  return diff / scale;
}

enum class Comm { kShm, kGloo };
// Exact: every weight dequantised to f32 at load (--dequantize); packed: the file's blocks, on
// the canonical path (exact row-parallel sums), at one thread or two, or with float sums.
enum class Weights { kExact, kPacked, kPackedTwoThreads, kPackedFloatSums };

// Packed worlds with float sums: logits of the world of P within this fraction of the row's largest
// logit of the world of one (8-bit activation rounding noise, measured up to ~8% on the mixed
// steps), and a parting greedy continuation allowed only where the world of one's top-two margin
// was below kNearTie.
constexpr double kPackedLogitTolerance = 0.15;
constexpr float kNearTie = 1.0f;

// Rank 0's sampled tokens, handed to the other ranks of its world (the coordinator's part).
struct Lockstep {
  explicit Lockstep(int world) : barrier(world) {}
  std::barrier<> barrier;
  std::vector<int32_t> next;  // written by rank 0 between two barrier phases
};

// What one rank saw.
struct RankResult {
  absl::Status status;
  std::vector<std::vector<float>> step_logits;  // per step: [rows, vocab] (rank 0; else empty)
  std::vector<std::vector<int32_t>> greedy;     // per prompt: generated ids, EOS included
  std::vector<std::vector<float>> margins;      // per prompt and token: top-two logit gap
  int64_t weight_bytes = 0;
  bool exact_sums = false;                        // the model took the canonical path
  double load_s = 0, logits_s = 0, greedy_s = 0;  // wall time of each phase
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

// One rank: loads its slice, then (if `steps`) runs MixedSteps() and the greedy batch.
absl::Status RunRank(const model::WeightSource& weights, comm::Store* store, Comm kind,
                     Weights mode, int rank, int world, bool steps, Lockstep* sync,
                     RankResult* out) {
  auto plan = model::MakeShardPlan(weights.config(), rank, world);
  if (!plan.ok()) return plan.status();
  const std::string prefix = absl::StrCat("tp", world, kind == Comm::kShm ? "shm" : "gloo", "mode",
                                          static_cast<int>(mode), "/");
  absl::StatusOr<std::unique_ptr<comm::Communicator>> comm;
  if (kind == Comm::kShm) {
    comm::ShmOptions options;
    options.prefix = prefix;
    options.timeout = absl::Seconds(60);
    options.spin = absl::ZeroDuration();  // more ranks than cores, often
    comm = comm::CreateShmCommunicator(store, rank, world, options);
  } else {
    comm::GlooOptions options;
    options.prefix = prefix;
    options.timeout = absl::Seconds(60);
    comm = comm::CreateGlooCommunicator(store, rank, world, options);
  }
  if (!comm.ok()) return comm.status();
  const std::vector<std::vector<int32_t>>& prompts = Prompts();
  const int num_prompts = static_cast<int>(prompts.size());
  int64_t prompt_tokens = 0;
  for (const std::vector<int32_t>& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  absl::Time start = absl::Now();
  CpuBackend backend(mode == Weights::kPackedTwoThreads ? 2 : 1);
  EngineOptions engine_options;
  engine_options.kv_blocks = (kMixedSeqs + num_prompts) * kBlocksPerSeq;
  engine_options.max_batch_tokens = prompt_tokens;  // all 16 prompts prefill in one step
  engine_options.dequantize = mode == Weights::kExact;
  engine_options.tp_invariant = mode != Weights::kPackedFloatSums;
  auto model = LlamaModel::Load(weights, *plan, &backend, comm->get(), engine_options);
  if (!model.ok()) return model.status();
  out->weight_bytes = (*model)->weight_bytes();
  out->exact_sums = (*model)->exact_sums();
  out->load_s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!steps) return absl::OkStatus();

  start = absl::Now();
  for (const StepBatch& step : MixedSteps()) {
    std::vector<float> logits;
    if (absl::Status s = (*model)->Forward(step, &logits); !s.ok()) return s;
    out->step_logits.push_back(std::move(logits));
  }
  out->logits_s = absl::ToDoubleSeconds(absl::Now() - start);

  // Greedy continuations of every prompt, all decoded together: one step per token, the
  // first a prefill of every prompt; each sequence in its own blocks (none used above), until
  // it has kGreedyTokens tokens or has produced EOS (kept).
  start = absl::Now();
  const int64_t vocab = weights.config().vocab_size;
  Sampler sampler;
  SamplingParams greedy;
  greedy.temperature = 0.0f;  // argmax; a tie goes to the lowest id
  std::vector<StepSequence> seqs(num_prompts);
  for (int p = 0; p < num_prompts; ++p) seqs[p] = {prompts[p], 0, Blocks(kMixedSeqs + p)};
  std::vector<int> active(num_prompts);  // prompts still generating, in batch order
  std::iota(active.begin(), active.end(), 0);
  out->greedy.assign(num_prompts, {});
  out->margins.assign(num_prompts, {});
  for (int t = 0; t < kGreedyTokens && !active.empty(); ++t) {
    StepBatch step;
    for (int p : active) step.sequences.push_back(seqs[p]);
    std::vector<float> logits;
    if (absl::Status s = (*model)->Forward(step, &logits); !s.ok()) return s;
    const int64_t want_logits = rank == 0 ? static_cast<int64_t>(active.size()) * vocab : 0;
    if (static_cast<int64_t>(logits.size()) != want_logits) {
      return absl::InternalError(absl::StrCat("step ", t, ": ", logits.size(), " logits"));
    }
    if (rank == 0) {
      sync->next.clear();
      for (size_t i = 0; i < active.size(); ++i) {
        const int p = active[i];
        std::vector<float> row(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
        std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
        out->margins[p].push_back(row[0] - row[1]);
        sync->next.push_back(sampler
                                 .Sample(absl::MakeConstSpan(logits.data() + i * vocab, vocab),
                                         greedy, TokenHistory{prompts[p], out->greedy[p]},
                                         out->greedy[p].size())
                                 .token_id);
      }
    }
    sync->barrier.arrive_and_wait();  // rank 0's tokens are out
    std::vector<int> still;
    for (size_t i = 0; i < active.size(); ++i) {
      const int p = active[i];
      std::vector<int32_t>& generated = out->greedy[p];
      const int32_t next = sync->next[i];
      generated.push_back(next);
      seqs[p].start_pos += static_cast<int32_t>(seqs[p].tokens.size());
      seqs[p].tokens = {next};
      if (next != kEos && static_cast<int>(generated.size()) < kGreedyTokens) still.push_back(p);
    }
    active = std::move(still);
    sync->barrier.arrive_and_wait();  // every rank has read them
  }
  out->greedy_s = absl::ToDoubleSeconds(absl::Now() - start);
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
    loads_.clear();
  }

  using Key = std::tuple<int, Comm, Weights>;

  // The world of `world` ranks over `kind` with `mode` weights, run once and remembered.
  static const std::vector<RankResult>& World(int world, Comm kind = Comm::kShm,
                                              Weights mode = Weights::kExact) {
    const Key key{world, kind, mode};
    auto it = results_.find(key);
    if (it != results_.end()) return it->second;
    return results_[key] = Run(world, /*steps=*/true, kind, mode);
  }

  // The world of `world` ranks loaded (weight_bytes), run or not; remembered. Lets the memory
  // test, alone in a process (ctest), skip the forward steps.
  static const std::vector<RankResult>& Loaded(int world, Weights mode = Weights::kExact) {
    const Key key{world, Comm::kShm, mode};
    auto it = results_.find(key);
    if (it != results_.end()) return it->second;
    it = loads_.find(key);
    if (it != loads_.end()) return it->second;
    return loads_[key] = Run(world, /*steps=*/false, Comm::kShm, mode);
  }

  static std::vector<RankResult> Run(int world, bool steps, Comm kind, Weights mode) {
    std::vector<RankResult> ranks(world);
    comm::InMemoryStore store;
    Lockstep sync(world);
    const absl::Time start = absl::Now();
    std::vector<std::thread> threads;
    threads.reserve(world);
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        ranks[r].status = RunRank(*weights_, &store, kind, mode, r, world, steps, &sync, &ranks[r]);
      });
    }
    for (std::thread& t : threads) t.join();
    if (!steps) return ranks;
    std::printf(
        "world of %d over %s, %s weights: %.1f s (rank 0: load %.1f s, logit steps %.1f s, "
        "greedy %.1f s)\n",
        world, kind == Comm::kShm ? "shm" : "gloo",
        mode == Weights::kExact             ? "exact"
        : mode == Weights::kPackedFloatSums ? "packed (float sums)"
                                            : "packed",
        absl::ToDoubleSeconds(absl::Now() - start), ranks[0].load_s, ranks[0].logits_s,
        ranks[0].greedy_s);
    int eos = 0;
    size_t generated = 0;
    for (const std::vector<int32_t>& g : ranks[0].greedy) {
      eos += !g.empty() && g.back() == kEos;
      generated += g.size();
    }
    std::printf("world of %d, rank 0: %zu greedy tokens over %zu prompts, %d ended with EOS\n",
                world, generated, ranks[0].greedy.size(), eos);
    return ranks;
  }

  // Every rank of `world` against rank 0 of the world of one.
  static void ExpectMatchesWorldOfOne(int world, Comm kind = Comm::kShm) {
    const std::vector<RankResult>& ref = World(1);
    ASSERT_TRUE(ref[0].status.ok()) << ref[0].status;
    const std::vector<RankResult>& got = World(world, kind);
    const int64_t vocab = weights_->config().vocab_size;
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(got[r].status.ok()) << "rank " << r << ": " << got[r].status;
      ASSERT_EQ(got[r].step_logits.size(), ref[0].step_logits.size());
      if (r > 0) {
        for (const std::vector<float>& l : got[r].step_logits) EXPECT_TRUE(l.empty());
        continue;  // only rank 0 receives logits
      }
      double worst = 0;
      for (size_t s = 0; s < ref[0].step_logits.size(); ++s) {
        const std::vector<float>& want = ref[0].step_logits[s];
        const std::vector<float>& have = got[r].step_logits[s];
        ASSERT_EQ(have.size(), want.size()) << "step " << s;
        for (size_t row = 0; row < want.size() / vocab; ++row) {
          const double rel = RelativeRowDifference(have, want, row, vocab);
          worst = std::max(worst, rel);
          EXPECT_LE(rel, 1e-4) << "world " << world << ", rank " << r << ", step " << s << ", row "
                               << row;
        }
      }
      std::printf("world of %d, rank %d: worst relative logit difference %.2e\n", world, r, worst);
      const size_t prompts = ref[0].greedy.size();
      ASSERT_EQ(got[r].greedy.size(), prompts);
      int identical = 0;
      for (size_t p = 0; p < prompts; ++p) {
        EXPECT_EQ(got[r].greedy[p], ref[0].greedy[p])
            << "world " << world << ", rank " << r << ", prompt " << p;
        identical += got[r].greedy[p] == ref[0].greedy[p];
      }
      std::printf(
          "world of %d, rank %d: %d of %zu greedy continuations identical to the world of one\n",
          world, r, identical, prompts);
    }
  }

  // Packed weights: every rank of `world` against the packed world of one, to quantisation
  // noise; greedy continuations identical or parting at a near-tie of the world of one.
  // The canonical path: the world's logits (every step) and greedy tokens are the world of
  // one's, bit for bit.
  static void ExpectPackedBitIdenticalToWorldOfOne(int world, Weights mode) {
    const std::vector<RankResult>& ref = World(1, Comm::kShm, Weights::kPacked);
    ASSERT_TRUE(ref[0].status.ok()) << ref[0].status;
    ASSERT_TRUE(ref[0].exact_sums);
    const std::vector<RankResult>& got = World(world, Comm::kShm, mode);
    ASSERT_TRUE(got[0].status.ok()) << got[0].status;
    ASSERT_TRUE(got[0].exact_sums);
    ASSERT_EQ(got[0].step_logits.size(), ref[0].step_logits.size());
    for (size_t s = 0; s < ref[0].step_logits.size(); ++s) {
      const std::vector<float>& want = ref[0].step_logits[s];
      const std::vector<float>& have = got[0].step_logits[s];
      ASSERT_EQ(have.size(), want.size()) << "step " << s;
      EXPECT_EQ(std::memcmp(have.data(), want.data(), want.size() * sizeof(float)), 0)
          << "world " << world << ", step " << s << ": logits differ";
    }
    int identical = 0;
    for (size_t p = 0; p < ref[0].greedy.size(); ++p) {
      EXPECT_EQ(got[0].greedy[p], ref[0].greedy[p]) << "world " << world << ", prompt " << p;
      identical += got[0].greedy[p] == ref[0].greedy[p];
    }
    std::printf(
        "world of %d, packed%s: logits bit-identical to the world of one's; %d of %zu "
        "greedy continuations identical\n",
        world, mode == Weights::kPackedTwoThreads ? " (2 threads)" : "", identical,
        ref[0].greedy.size());
  }

  // Float sums: the world's logits within quantisation noise of the world of one's, partings
  // only at near ties.
  static void ExpectPackedCloseToWorldOfOne(int world) {
    const std::vector<RankResult>& ref = World(1, Comm::kShm, Weights::kPackedFloatSums);
    ASSERT_TRUE(ref[0].status.ok()) << ref[0].status;
    const std::vector<RankResult>& got = World(world, Comm::kShm, Weights::kPackedFloatSums);
    ASSERT_TRUE(got[0].status.ok()) << got[0].status;
    const int64_t vocab = weights_->config().vocab_size;
    double worst = 0;
    ASSERT_EQ(got[0].step_logits.size(), ref[0].step_logits.size());
    for (size_t s = 0; s < ref[0].step_logits.size(); ++s) {
      const std::vector<float>& want = ref[0].step_logits[s];
      const std::vector<float>& have = got[0].step_logits[s];
      ASSERT_EQ(have.size(), want.size()) << "step " << s;
      for (size_t row = 0; row < want.size() / vocab; ++row) {
        const double rel = RelativeRowDifference(have, want, row, vocab);
        worst = std::max(worst, rel);
        EXPECT_LE(rel, kPackedLogitTolerance) << "world " << world << ", step " << s;
      }
    }
    int identical = 0, near_ties = 0;
    for (size_t p = 0; p < ref[0].greedy.size(); ++p) {
      const std::vector<int32_t>& a = ref[0].greedy[p];
      const std::vector<int32_t>& b = got[0].greedy[p];
      if (a == b) {
        ++identical;
        continue;
      }
      const size_t part = std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin();
      ASSERT_LT(part, ref[0].margins[p].size()) << "prompt " << p;
      const float margin = ref[0].margins[p][part];
      EXPECT_LT(margin, kNearTie) << "world " << world << ", prompt " << p << " parts at token "
                                  << part << " where the world of one's top two differ by "
                                  << margin;
      near_ties += margin < kNearTie;
      std::printf("world of %d, packed: prompt %zu parts at token %zu (top-two margin %.3f)\n",
                  world, p, part, margin);
    }
    std::printf(
        "world of %d, packed: worst relative logit difference %.2e; %d of %zu continuations "
        "identical, %d part at a near-tie\n",
        world, worst, identical, ref[0].greedy.size(), near_ties);
  }

  static const model::WeightSource* weights_;
  static std::map<Key, std::vector<RankResult>> results_;  // worlds run
  static std::map<Key, std::vector<RankResult>> loads_;    // worlds only loaded
};

const model::WeightSource* TensorParallelTest::weights_ = nullptr;
std::map<TensorParallelTest::Key, std::vector<RankResult>> TensorParallelTest::results_;
std::map<TensorParallelTest::Key, std::vector<RankResult>> TensorParallelTest::loads_;

TEST(TensorParallelPromptsTest, SixteenPromptsOfDifferentLengths) {
  const std::vector<std::vector<int32_t>>& prompts = Prompts();
  ASSERT_EQ(prompts.size(), 16u);
  std::vector<size_t> lengths;
  for (const std::vector<int32_t>& p : prompts) {
    EXPECT_GE(p.size(), 3u);
    EXPECT_LE(p.size(), 60u);
    EXPECT_LE(p.size() + kGreedyTokens, static_cast<size_t>(kBlocksPerSeq) * 16);
    lengths.push_back(p.size());
  }
  std::sort(lengths.begin(), lengths.end());
  EXPECT_EQ(std::adjacent_find(lengths.begin(), lengths.end()), lengths.end());
  EXPECT_EQ(lengths.front(), 3u);
  EXPECT_EQ(lengths.back(), 60u);
}

TEST_F(TensorParallelTest, WorldOfTwoMatchesWorldOfOne) { ExpectMatchesWorldOfOne(2); }
TEST_F(TensorParallelTest, WorldOfTwoOverGlooMatchesWorldOfOne) {
  ExpectMatchesWorldOfOne(2, Comm::kGloo);
}

// At two ranks a + b = b + a: shared memory and Gloo's ring give the same bits.
TEST_F(TensorParallelTest, ShmAndGlooGiveTheSameBitsAtTwoRanks) {
  const std::vector<RankResult>& shm = World(2, Comm::kShm);
  const std::vector<RankResult>& gloo = World(2, Comm::kGloo);
  ASSERT_TRUE(shm[0].status.ok() && gloo[0].status.ok());
  ASSERT_EQ(shm[0].step_logits.size(), gloo[0].step_logits.size());
  for (size_t s = 0; s < shm[0].step_logits.size(); ++s) {
    const std::vector<float>& a = shm[0].step_logits[s];
    const std::vector<float>& b = gloo[0].step_logits[s];
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "step " << s;
  }
  EXPECT_EQ(shm[0].greedy, gloo[0].greedy);
}
TEST_F(TensorParallelTest, WorldOfThreeMatchesWorldOfOne) { ExpectMatchesWorldOfOne(3); }
TEST_F(TensorParallelTest, WorldOfFourMatchesWorldOfOne) { ExpectMatchesWorldOfOne(4); }
// The canonical path: worlds of 2, 3 and 4 (uneven heads, replicated KV heads), and a world of
// 2 at two threads a rank, give the world of one's bits.
TEST_F(TensorParallelTest, PackedWorldsOfTwoToFourAndTwoThreadsAreBitIdentical) {
  for (int world : {2, 3, 4}) ExpectPackedBitIdenticalToWorldOfOne(world, Weights::kPacked);
  ExpectPackedBitIdenticalToWorldOfOne(2, Weights::kPackedTwoThreads);
}
TEST_F(TensorParallelTest, PackedWorldOfTwoWithFloatSumsPartsOnlyAtNearTies) {
  ExpectPackedCloseToWorldOfOne(2);
}

// Packed, a rank holds its share of the file's bytes: the world of one, whose tied LM head is
// its embedding table, no more than the file itself (norms are f32 in the file too).
TEST_F(TensorParallelTest, PackedWeightsHoldWhatTheFileHolds) {
  const std::vector<RankResult>& one = Loaded(1, Weights::kPacked);
  ASSERT_TRUE(one[0].status.ok()) << one[0].status;
  const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(kModel));
  std::printf("packed world of 1: %lld weight bytes, file %lld bytes (%.3fx)\n",
              static_cast<long long>(one[0].weight_bytes), static_cast<long long>(file_bytes),
              static_cast<double>(one[0].weight_bytes) / file_bytes);
  EXPECT_LE(one[0].weight_bytes, file_bytes);
  const std::vector<RankResult>& two = Loaded(2, Weights::kPacked);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(two[r].status.ok()) << two[r].status;
    std::printf("packed world of 2, rank %d: %lld weight bytes (%.3fx the file)\n", r,
                static_cast<long long>(two[r].weight_bytes),
                static_cast<double>(two[r].weight_bytes) / file_bytes);
    // Its layer shard, the whole embedding table (replicated) and half the LM head.
    EXPECT_LE(two[r].weight_bytes, file_bytes);
  }
}

TEST_F(TensorParallelTest, ShardingDividesTheWeightMemory) {
  const model::ModelConfig& c = weights_->config();
  const int64_t f32 = sizeof(float);
  const int64_t embedding = c.vocab_size * c.d_model * f32;      // [vocab, d] replicated
  const int64_t norms = (2 * c.n_layers + 1) * c.d_model * f32;  // [1, d] each
  const int64_t replicated = embedding + norms;
  std::printf("%-6s %-5s %14s %14s %14s\n", "world", "rank", "weight_bytes", "sharded", "layers");
  std::map<int, int64_t> max_sharded, max_layers;
  for (int world = 1; world <= 3; ++world) {
    const std::vector<RankResult>& ranks = Loaded(world);
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
