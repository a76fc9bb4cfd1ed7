// Scheduler: budgets and limits hold on every step, chunked prefill covers every position
// exactly once per (re)computation, preemption frees blocks and recomputes, and every
// workload whose sequences each fit the cache alone finishes (no deadlock).
#include "server/coordinator/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

namespace tpserve::coordinator {
namespace {

struct Workload {
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::map<uint64_t, int64_t> max_tokens;
};

// Adds a sequence with `prompt_len` prompt tokens that will generate `gen` tokens.
Sequence* Add(Workload* w, Scheduler* s, int64_t prompt_len, int64_t gen) {
  auto seq = std::make_unique<Sequence>();
  seq->id = w->seqs.size() + 1;
  for (int64_t i = 0; i < prompt_len; ++i) seq->prompt.push_back(static_cast<int32_t>(i % 97));
  w->max_tokens[seq->id] = gen;
  s->Enqueue(seq.get());
  w->seqs.push_back(std::move(seq));
  return w->seqs.back().get();
}

// The fake model: the token sampled after position p is a function of (id, p), so a
// recomputed sequence must reproduce it.
int32_t NextToken(const Sequence& seq) {
  return static_cast<int32_t>((seq.id * 31 + static_cast<uint64_t>(seq.length())) % 1000);
}

struct RunStats {
  int steps = 0;
  int preemptions = 0;
  int64_t max_running = 0;
};

// Runs steps until every sequence finished (or `step_limit`), checking invariants.
RunStats RunToCompletion(Workload* w, Scheduler* s, BlockManager* blocks,
                         const SchedulerOptions& options, int step_limit) {
  RunStats stats;
  size_t finished = 0;
  while (finished < w->seqs.size()) {
    EXPECT_LT(stats.steps, step_limit) << "no progress: deadlock?";
    if (stats.steps >= step_limit) break;
    ++stats.steps;
    const StepPlan plan = s->Schedule();
    stats.preemptions += static_cast<int>(plan.preempted.size());
    EXPECT_FALSE(plan.empty()) << "an empty step with work left";
    EXPECT_LE(plan.tokens, options.max_batch_tokens);
    EXPECT_LE(s->running(), options.max_running);
    stats.max_running = std::max(stats.max_running, s->running());
    int64_t tokens = 0;
    for (const PlannedSequence& e : plan.entries) {
      EXPECT_EQ(e.start, e.seq->computed);
      EXPECT_GT(e.count, 0);
      EXPECT_LE(e.start + e.count, e.seq->length());
      EXPECT_GE(static_cast<int64_t>(e.seq->block_table.size()) * blocks->block_size(),
                e.start + e.count);
      EXPECT_EQ(e.sample, e.start + e.count == e.seq->length());
      tokens += e.count;
    }
    EXPECT_EQ(tokens, plan.tokens);
    s->Commit(plan);
    for (const PlannedSequence& e : plan.entries) {
      if (!e.sample) continue;
      e.seq->generated.push_back(NextToken(*e.seq));
      if (static_cast<int64_t>(e.seq->generated.size()) == w->max_tokens[e.seq->id]) {
        s->Remove(e.seq);
        ++finished;
      }
    }
  }
  EXPECT_EQ(blocks->free_blocks(), blocks->total_blocks()) << "blocks leaked";
  EXPECT_EQ(s->running() + s->waiting(), 0);
  for (const auto& seq : w->seqs) {
    EXPECT_EQ(static_cast<int64_t>(seq->generated.size()), w->max_tokens[seq->id]);
    Sequence replay;
    replay.id = seq->id;
    replay.prompt = seq->prompt;
    for (int32_t t : seq->generated) {
      EXPECT_EQ(t, NextToken(replay)) << "sequence " << seq->id << " diverged";
      replay.generated.push_back(t);
    }
  }
  return stats;
}

TEST(SchedulerTest, ChunkedPrefillThenDecodeInOneBatch) {
  BlockManager blocks(100, 16);
  SchedulerOptions options{.max_batch_tokens = 32, .max_running = 8};
  Scheduler s(options, &blocks);
  Workload w;
  Sequence* a = Add(&w, &s, 70, 3);
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].count, 32);
  EXPECT_FALSE(p.entries[0].sample);
  s.Commit(p);
  Sequence* b = Add(&w, &s, 5, 2);
  p = s.Schedule();  // a's second chunk fills the budget: b waits
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].seq, a);
  s.Commit(p);
  p = s.Schedule();  // a's last 6 tokens, then b's whole prompt
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.entries[0].count, 6);
  EXPECT_TRUE(p.entries[0].sample);
  EXPECT_EQ(p.entries[1].seq, b);
  EXPECT_EQ(p.entries[1].count, 5);
  EXPECT_TRUE(p.entries[1].sample);
  s.Commit(p);
  a->generated.push_back(1);
  b->generated.push_back(2);
  p = s.Schedule();  // two decode tokens
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.tokens, 2);
  EXPECT_EQ(p.entries[0].start, 70);
  EXPECT_EQ(p.entries[1].start, 5);
}

TEST(SchedulerTest, RunningLimitHoldsNewcomersBack) {
  BlockManager blocks(100, 16);
  SchedulerOptions options{.max_batch_tokens = 512, .max_running = 2};
  Scheduler s(options, &blocks);
  Workload w;
  for (int i = 0; i < 5; ++i) Add(&w, &s, 4, 2);
  const StepPlan p = s.Schedule();
  EXPECT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(s.running(), 2);
  EXPECT_EQ(s.waiting(), 3);
}

TEST(SchedulerTest, OutOfBlocksPreemptsTheNewestAndRecomputes) {
  // 6 blocks of 4 tokens; three sequences of 8 prompt tokens each take 2 blocks, then grow.
  BlockManager blocks(6, 4);
  SchedulerOptions options{.max_batch_tokens = 64, .max_running = 8};
  Scheduler s(options, &blocks);
  Workload w;
  Sequence* a = Add(&w, &s, 8, 6);
  Sequence* b = Add(&w, &s, 8, 6);
  Sequence* c = Add(&w, &s, 8, 6);
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.entries.size(), 3u);
  EXPECT_EQ(blocks.free_blocks(), 0);
  s.Commit(p);
  for (Sequence* seq : {a, b, c}) seq->generated.push_back(NextToken(*seq));
  p = s.Schedule();  // a needs a third block: c (newest) is preempted
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], c);
  EXPECT_EQ(c->computed, 0);
  EXPECT_TRUE(c->block_table.empty());
  EXPECT_EQ(c->preemptions, 1);
  EXPECT_EQ(s.waiting(), 1);
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.entries[0].seq, a);
  EXPECT_EQ(p.entries[1].seq, b);
}

// With prefix caching too: the sequences' prompts share their leading tokens (Add), so
// admissions hit the cache, and preempted sequences find their own blocks again.
class SchedulerPressureTest : public ::testing::TestWithParam<bool> {};

TEST_P(SchedulerPressureTest, RandomWorkloadsAlwaysFinishUnderPressure) {
  std::mt19937 rng(1234);
  int preemptions = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t block_size = 1 + static_cast<int64_t>(rng() % 16);
    const int64_t capacity_tokens = 64 + static_cast<int64_t>(rng() % 256);
    BlockManager blocks(capacity_tokens / block_size, block_size, /*prefix_caching=*/GetParam());
    const int64_t usable = blocks.total_blocks() * block_size;
    SchedulerOptions options{.max_batch_tokens = 1 + static_cast<int64_t>(rng() % 96),
                             .max_running = 1 + static_cast<int64_t>(rng() % 12)};
    Scheduler s(options, &blocks);
    Workload w;
    const int n = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      // Each sequence fits the cache alone: prompt + max_tokens <= usable.
      const int64_t prompt = 1 + static_cast<int64_t>(rng() % (usable / 2));
      const int64_t gen = 1 + static_cast<int64_t>(rng() % (usable - prompt));
      Add(&w, &s, prompt, gen);
    }
    preemptions += RunToCompletion(&w, &s, &blocks, options, 100000).preemptions;
    EXPECT_TRUE(blocks.CheckInvariants().ok()) << blocks.CheckInvariants();
    if (HasFailure()) {
      ADD_FAILURE() << "trial " << trial;
      break;
    }
  }
  EXPECT_GT(preemptions, 0) << "the workloads never ran out of blocks: the test lost its point";
}

INSTANTIATE_TEST_SUITE_P(Caching, SchedulerPressureTest, ::testing::Bool());

TEST(SchedulerTest, AdmissionSharesTheCachedPrefixAndComputesTheRest) {
  BlockManager blocks(20, 4, /*prefix_caching=*/true);
  SchedulerOptions options{.max_batch_tokens = 64, .max_running = 8};
  Scheduler s(options, &blocks);
  Workload w;
  Sequence* a = Add(&w, &s, 10, 2);  // tokens 0..9: two full blocks
  s.Commit(s.Schedule());
  a->generated.push_back(NextToken(*a));
  Sequence* b = Add(&w, &s, 13, 1);  // tokens 0..12: shares a's two full blocks
  const StepPlan p = s.Schedule();
  ASSERT_EQ(p.entries.size(), 2u);  // a's decode token and b
  EXPECT_EQ(p.entries[1].seq, b);
  EXPECT_EQ(p.entries[1].start, 8);
  EXPECT_EQ(p.entries[1].count, 5);
  EXPECT_EQ(p.prefix_queried, 12);
  EXPECT_EQ(p.prefix_hits, 8);
  EXPECT_EQ(b->block_table[0], a->block_table[0]);
  EXPECT_EQ(b->block_table[1], a->block_table[1]);
  EXPECT_EQ(blocks.refs(a->block_table[0]), 2);
}

TEST(SchedulerTest, PreemptAllRequeuesInAdmissionOrder) {
  BlockManager blocks(50, 4);
  SchedulerOptions options{.max_batch_tokens = 100, .max_running = 8};
  Scheduler s(options, &blocks);
  Workload w;
  Sequence* a = Add(&w, &s, 5, 3);
  Sequence* b = Add(&w, &s, 6, 3);
  s.Commit(s.Schedule());
  Sequence* c = Add(&w, &s, 7, 3);
  s.PreemptAll();
  EXPECT_EQ(blocks.free_blocks(), 50);
  EXPECT_EQ(s.running(), 0);
  const StepPlan p = s.Schedule();
  ASSERT_EQ(p.entries.size(), 3u);
  EXPECT_EQ(p.entries[0].seq, a);
  EXPECT_EQ(p.entries[1].seq, b);
  EXPECT_EQ(p.entries[2].seq, c);
  EXPECT_EQ(p.entries[0].count, 5);
}

TEST(SchedulerTest, RemoveFreesBlocksFromEitherQueue) {
  BlockManager blocks(10, 4);
  Scheduler s({.max_batch_tokens = 100, .max_running = 1}, &blocks);
  Workload w;
  Sequence* a = Add(&w, &s, 9, 3);
  Sequence* b = Add(&w, &s, 9, 3);
  s.Commit(s.Schedule());
  EXPECT_EQ(blocks.free_blocks(), 7);
  s.Remove(b);  // waiting
  EXPECT_EQ(s.waiting(), 0);
  s.Remove(a);  // running
  EXPECT_EQ(s.running(), 0);
  EXPECT_EQ(blocks.free_blocks(), 10);
  s.Remove(a);  // unknown now: no-op
  EXPECT_EQ(blocks.free_blocks(), 10);
}

// The fake model's token at position `pos` of sequence `id` (NextToken at that length).
int32_t TokenAt(uint64_t id, int64_t pos) {
  return static_cast<int32_t>((id * 31 + static_cast<uint64_t>(pos)) % 1000);
}

TEST(SchedulerTest, ADraftTakesWhatIsLeftAndOnlyItsAcceptedPositionsCount) {
  BlockManager blocks(4, 4);
  Scheduler s({.max_batch_tokens = 12, .max_running = 4}, &blocks);
  Workload w;
  Sequence* a = Add(&w, &s, 5, 20);
  s.Commit(s.Schedule());  // the prompt: 2 blocks
  a->generated.push_back(1);
  a->draft = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].start, 5);
  EXPECT_EQ(p.entries[0].draft, 10) << "the budget of 12 leaves room for 11, the blocks for 10";
  EXPECT_EQ(p.entries[0].count, 11);
  EXPECT_EQ(p.draft_tokens, 10);
  EXPECT_EQ(a->token_at(6), 2);          // the draft follows the generated tokens
  EXPECT_EQ(a->block_table.size(), 4u);  // positions [0, 16)
  s.Commit(p);
  EXPECT_EQ(a->computed, 6) << "only its last token is cached";
  a->generated.insert(a->generated.end(), {2, 3, 11});  // two proposals kept, then a draw
  s.Accept(a, 2);
  EXPECT_EQ(a->computed, 8);
  EXPECT_EQ(a->length() - a->computed, 1);
  // A draft never preempts anyone, and takes only blocks no plain step or admission wants:
  // with every block a's, b waits, and a's draft shrinks to what its blocks hold.
  Sequence* b = Add(&w, &s, 3, 2);
  a->draft = {5, 6, 7, 8, 9, 10, 11, 12, 13};
  p = s.Schedule();
  EXPECT_TRUE(p.preempted.empty());
  ASSERT_EQ(p.entries.size(), 1u) << "no block is free for b: it waits";
  EXPECT_EQ(p.entries[0].draft, 7) << "a's 4 blocks hold positions up to 16";
  EXPECT_EQ(s.waiting(), 1);
  (void)b;
}

// Sequences that propose drafts (some right, some wrong) in a tight cache, with and without
// prefix caching: budgets and rows hold, no block leaks, every sequence keeps the fake
// model's tokens, and the accepted positions' KV counts as cached.
TEST(SchedulerTest, DraftsUnderPressureLeakNoBlockAndKeepEveryToken) {
  for (bool caching : {false, true}) {
    BlockManager blocks(20, 4, caching);
    const SchedulerOptions options{.max_batch_tokens = 12, .max_running = 5, .max_logit_rows = 9};
    Scheduler s(options, &blocks);
    Workload w;
    std::mt19937 rng(11);
    for (int i = 0; i < 12; ++i) Add(&w, &s, 3 + i % 5, 6 + i % 9);
    size_t finished = 0;
    int drafted = 0;
    for (int step = 0; finished < w.seqs.size(); ++step) {
      ASSERT_LT(step, 2000) << "no progress";
      for (const auto& seq : w.seqs) {
        seq->draft.clear();
        if (seq->computed == 0 || seq->computed + 1 != seq->length()) continue;
        const int k = static_cast<int>(rng() % 5);
        for (int j = 0; j < k; ++j) seq->draft.push_back(TokenAt(seq->id, seq->length() + j));
        if (k > 0 && rng() % 2 == 0) seq->draft[rng() % k] = 1001;  // a wrong proposal
      }
      const StepPlan plan = s.Schedule();
      ASSERT_FALSE(plan.empty());
      EXPECT_LE(plan.tokens, options.max_batch_tokens);
      int64_t rows = 0;
      for (const PlannedSequence& e : plan.entries) {
        rows += e.sample ? 1 + e.draft : 0;
        EXPECT_LE(e.draft, static_cast<int64_t>(e.seq->draft.size()));
        EXPECT_GE(static_cast<int64_t>(e.seq->block_table.size()) * 4, e.start + e.count);
      }
      EXPECT_LE(rows, options.max_logit_rows);
      drafted += static_cast<int>(plan.draft_tokens);
      s.Commit(plan);
      for (const PlannedSequence& e : plan.entries) {
        if (!e.sample) continue;
        Sequence* seq = e.seq;
        const int64_t length = seq->length();
        int64_t accepted = 0;
        while (accepted < e.draft && seq->draft[accepted] == TokenAt(seq->id, length + accepted)) {
          ++accepted;
        }
        bool done = false;
        for (int64_t j = 0; j <= accepted && !done; ++j) {
          seq->generated.push_back(TokenAt(seq->id, length + j));
          done = static_cast<int64_t>(seq->generated.size()) == w.max_tokens[seq->id];
        }
        if (done) {
          s.Remove(seq);
          ++finished;
        } else {
          s.Accept(seq, accepted);
        }
      }
      ASSERT_TRUE(blocks.CheckInvariants().ok()) << blocks.CheckInvariants();
    }
    EXPECT_GT(drafted, 0);
    EXPECT_EQ(blocks.free_blocks(), blocks.total_blocks()) << "blocks leaked";
    for (const auto& seq : w.seqs) {
      ASSERT_EQ(static_cast<int64_t>(seq->generated.size()), w.max_tokens[seq->id]);
      for (size_t i = 0; i < seq->generated.size(); ++i) {
        EXPECT_EQ(seq->generated[i], TokenAt(seq->id, seq->prompt.size() + i));
      }
    }
  }
}

}  // namespace
}  // namespace tpserve::coordinator
