// DraftModel: against a real world of one in-process worker serving SmolLM2 (as its own
// draft), proposals are the model's greedy continuation — for two sequences at once, with a
// prompt longer than a draft step (chunked), and again after a proposal was rejected (its
// cache positions dropped and recomputed); forgotten sequences give every block back. Against
// a world that fails: no proposal and no error, then proposals again once it restarts. And the
// vocabulary check.
#include "server/coordinator/draft_model.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/kv_block.h"
#include "server/coordinator/worker_pool.h"
#include "server/protocol/step_codec.h"
#include "server/worker/model_root.h"
#include "server/worker/worker_server.h"

namespace tpserve::coordinator {
namespace {

const std::string kModel = TPSERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// `n` greedy tokens after `tokens`: one prefill, then one token per step (blocks from 0).
std::vector<int32_t> GreedyContinuation(StepExecutor* world, const std::vector<int32_t>& tokens,
                                        int n) {
  std::vector<int32_t> table;
  for (int64_t b = 0; b * kKvBlockSize < static_cast<int64_t>(tokens.size()) + n; ++b) {
    table.push_back(static_cast<int32_t>(b));
  }
  engine::SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<int32_t> out;
  std::vector<int32_t> feed = tokens;
  int64_t pos = 0;
  static uint64_t step_id = 0;
  for (int i = 0; i < n; ++i) {
    tpserve::v1::Step step;
    step.set_step_id(++step_id);
    protocol::AddStepSequence({.seq_id = 1,
                               .tokens = feed,
                               .start_pos = pos,
                               .block_table = table,
                               .sample = true,
                               .sample_index = static_cast<uint64_t>(i)},
                              greedy, {}, &step);
    absl::StatusOr<StepOutcome> outcome = world->RunStep(step);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    if (!outcome.ok() || outcome->result.tokens_size() != 1) return out;
    pos += static_cast<int64_t>(feed.size());
    feed = {outcome->result.tokens(0).token_id()};
    out.push_back(feed[0]);
  }
  return out;
}

std::vector<int32_t> Slice(const std::vector<int32_t>& v, size_t from, size_t to) {
  return {v.begin() + static_cast<ptrdiff_t>(from), v.begin() + static_cast<ptrdiff_t>(to)};
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(DraftModelTest, ProposesTheModelsGreedyContinuationAndRecoversFromARejection) {
  auto tokenizer = model::Tokenizer::Load(kModel);
  if (!tokenizer.ok()) GTEST_SKIP() << "no model: " << tokenizer.status();
  worker::WorkerServiceOptions service;
  service.model_root = *worker::ModelRoot::Open("/");
  auto worker = worker::WorkerServer::Start("127.0.0.1:0", std::move(service));
  ASSERT_TRUE(worker.ok()) << worker.status();
  WorkerPoolOptions options;
  options.workers = {absl::StrCat("127.0.0.1:", (*worker)->port())};
  options.model_path = kModel;
  options.kv_budget_bytes = 16 << 20;
  options.threads = 2;
  auto pool = std::make_unique<WorkerPool>(options);
  ASSERT_TRUE(pool->Start().ok());

  const std::vector<int32_t> a =
      *(*tokenizer)
           ->Encode("The lighthouse keeper climbed the spiral stairs every evening at dusk and",
                    true);
  const std::vector<int32_t> b = *(*tokenizer)->Encode("One, two, three,", true);
  ASSERT_GT(a.size(), 8u);  // longer than a draft step: its catch-up is chunked
  const std::vector<int32_t> want_a = GreedyContinuation(pool.get(), a, 6);
  const std::vector<int32_t> want_b = GreedyContinuation(pool.get(), b, 6);
  ASSERT_EQ(want_a.size(), 6u);
  // After the first two proposals, the target drew another token than the third.
  const int32_t other = want_a[2] == 100 ? 101 : 100;
  const std::vector<int32_t> a_after =
      Concat(Concat(a, Slice(want_a, 0, 2)), std::vector<int32_t>{other});
  const std::vector<int32_t> want_a_after = GreedyContinuation(pool.get(), a_after, 3);

  DraftModel draft(std::move(pool), {.max_batch_tokens = 8, .max_positions = 8192});
  ASSERT_TRUE(draft.Start().ok());
  const int64_t total = draft.free_blocks();
  Sequence seq_a{.id = 11, .prompt = a};
  Sequence seq_b{.id = 12, .prompt = b};
  std::vector<DraftJob> jobs = {{.seq = &seq_a, .length = 4, .draft = &seq_a.draft},
                                {.seq = &seq_b, .length = 3, .draft = &seq_b.draft}};
  draft.Propose(jobs);
  EXPECT_EQ(seq_a.draft, Slice(want_a, 0, 4));
  EXPECT_EQ(seq_b.draft, Slice(want_b, 0, 3));
  EXPECT_EQ(draft.last_proposed(), 7);
  EXPECT_GT(draft.steps(), 3);  // chunks of 8, then a step per further proposal

  // a: two accepted, then the target's own token; b: all three accepted and one more drawn.
  seq_a.generated = Concat(Slice(want_a, 0, 2), {other});
  seq_b.generated = Slice(want_b, 0, 4);
  jobs[0].length = 3;
  jobs[1].length = 2;
  draft.Propose(jobs);
  EXPECT_EQ(seq_a.draft, want_a_after);
  EXPECT_EQ(seq_b.draft, Slice(want_b, 4, 6));

  EXPECT_LT(draft.free_blocks(), total);
  draft.Forget(seq_a.id);
  draft.Forget(seq_b.id);
  EXPECT_EQ(draft.free_blocks(), total);
}

// A world whose draw is the next position (mod 1000), and whose steps can be made to fail.
class CountingWorld final : public StepExecutor {
 public:
  absl::Status Start() override {
    ++starts;
    return absl::OkStatus();
  }
  using StepExecutor::RunStep;
  absl::StatusOr<StepOutcome> RunStep(const tpserve::v1::Step& step, const StepMaskFill&) override {
    if (fail_next > 0) {
      --fail_next;
      return absl::UnavailableError("injected: the draft's world died");
    }
    StepOutcome outcome;
    for (const tpserve::v1::StepSequence& seq : step.sequences()) {
      if (!seq.sample()) continue;
      engine::SampleResult drawn;
      drawn.token_id = static_cast<int32_t>((seq.start_pos() + seq.token_ids_size()) % 1000);
      protocol::AddSampledToken(seq.seq_id(), drawn, &outcome.result);
    }
    return outcome;
  }
  int64_t kv_blocks() const override { return 16; }
  int64_t kv_block_size() const override { return kKvBlockSize; }
  std::string comm_backend() const override { return "counting"; }

  int starts = 0;
  int fail_next = 0;
};

TEST(DraftModelTest, AFailingWorldProposesNothingAndRestartsAfterItsBackoff) {
  auto owned = std::make_unique<CountingWorld>();
  CountingWorld* world = owned.get();
  DraftModel draft(std::move(owned), {.restart_backoff = absl::Milliseconds(50)});
  ASSERT_TRUE(draft.Start().ok());
  Sequence seq{.id = 1, .prompt = {5, 6, 7}};
  const std::vector<DraftJob> jobs = {{.seq = &seq, .length = 3, .draft = &seq.draft}};
  draft.Propose(jobs);
  EXPECT_EQ(seq.draft, (std::vector<int32_t>{3, 4, 5}));

  world->fail_next = 1;
  seq.generated = {3};
  draft.Propose(jobs);
  EXPECT_TRUE(seq.draft.empty());
  EXPECT_FALSE(draft.up());
  draft.Propose(jobs);  // within the backoff: not restarted
  EXPECT_TRUE(seq.draft.empty());
  EXPECT_EQ(world->starts, 1);
  absl::SleepFor(absl::Milliseconds(60));
  draft.Propose(jobs);  // restarted: the cache is rebuilt from the tokens
  EXPECT_EQ(world->starts, 2);
  EXPECT_TRUE(draft.up());
  EXPECT_EQ(seq.draft, (std::vector<int32_t>{4, 5, 6}));
}

TEST(DraftModelTest, AJobPastTheDraftsContextOrItsCacheDoesNotDraft) {
  DraftModel draft(std::make_unique<CountingWorld>(), {.max_positions = 20});
  ASSERT_TRUE(draft.Start().ok());
  Sequence near_end{.id = 1, .prompt = std::vector<int32_t>(19, 7)};
  Sequence too_long{.id = 2, .prompt = std::vector<int32_t>(16 * kKvBlockSize, 7)};
  draft.Propose({{.seq = &near_end, .length = 4, .draft = &near_end.draft}});
  EXPECT_EQ(near_end.draft, (std::vector<int32_t>{19, 20}));  // positions 19 and 20 at most
  DraftModel small(std::make_unique<CountingWorld>());
  ASSERT_TRUE(small.Start().ok());
  small.Propose({{.seq = &too_long, .length = 2, .draft = &too_long.draft}});
  EXPECT_TRUE(too_long.draft.empty());  // 16 blocks hold no room for a proposal
  EXPECT_EQ(small.free_blocks(), small.total_blocks());
}

TEST(DraftModelTest, VocabulariesMustMatchTokenForToken) {
  auto target = model::Tokenizer::Load(kModel);
  if (!target.ok()) GTEST_SKIP() << "no model: " << target.status();
  auto same = model::Tokenizer::Load(kModel);
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(CheckSameVocabulary(**target, **same).ok());
}

}  // namespace
}  // namespace tpserve::coordinator
