#include "server/coordinator/worker_pool.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "server/comm/communicator.h"
#include "server/engine/cpu_backend.h"
#include "server/engine/llama_model.h"
#include "server/model/plan/shard_plan.h"
#include "server/model/weights/weight_source.h"
#include "server/worker/worker_server.h"

namespace tpserve::coordinator {
namespace {

const std::string kModel = TPSERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::vector<int32_t> kPrompt = {504, 3575, 282, 4649, 314};  // "The capital of France is"

// A communicator whose collectives stall (until Abort) for `stall`: a worker that hangs.
class StallingCommunicator final : public comm::Communicator {
 public:
  explicit StallingCommunicator(absl::Duration stall) : stall_(stall) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string_view backend_name() const override { return "stalling"; }
  absl::Status AllReduceSum(float*, int64_t) override { return Stall(); }
  absl::Status AllGather(const float* in, int64_t count, float* out) override {
    std::copy(in, in + count, out);
    return Stall();
  }
  void Abort() override {
    absl::MutexLock lock(&mu_);
    aborted_ = true;
  }

 private:
  absl::Status Stall() {
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&aborted_), stall_)) {
      return absl::AbortedError("aborted");
    }
    return absl::OkStatus();
  }
  const absl::Duration stall_;
  absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
};

std::unique_ptr<worker::WorkerServer> StartWorker(worker::WorkerServiceOptions options = {}) {
  options.model_root = *worker::ModelRoot::Open("/");  // the test models live anywhere
  auto server = worker::WorkerServer::Start("127.0.0.1:0", std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  return *std::move(server);
}

WorkerPoolOptions PoolOptions(const std::vector<const worker::WorkerServer*>& workers) {
  WorkerPoolOptions o;
  for (const auto* w : workers) o.workers.push_back(absl::StrCat("127.0.0.1:", w->port()));
  o.model_path = kModel;
  o.kv_budget_bytes = 8 << 20;
  o.threads = 1;
  o.ready_timeout = absl::Seconds(60);
  return o;
}

tpserve::v1::Step PrefillStep(uint64_t id) {
  tpserve::v1::Step step;
  step.set_step_id(id);
  tpserve::v1::StepSequence* seq = step.add_sequences();
  seq->set_seq_id(7);
  seq->mutable_token_ids()->Add(kPrompt.begin(), kPrompt.end());
  seq->add_block_table(0);
  seq->set_sample(true);
  seq->mutable_sampling()->set_top_p(1.0f);
  seq->mutable_sampling()->set_repetition_penalty(1.0f);
  seq->mutable_sampling()->set_logprobs(2);
  return step;
}

// The greedy next token of kPrompt computed in this process.
int32_t InProcessArgmax() {
  auto weights = model::OpenWeightSource(kModel).value();
  auto plan = model::MakeShardPlan(weights->config(), 0, 1).value();
  engine::CpuBackend backend(1);
  comm::SingleRankCommunicator comm;
  engine::EngineOptions options;
  options.kv_blocks = 1;
  auto llama = engine::LlamaModel::Load(*weights, plan, &backend, &comm, options).value();
  engine::StepSequence seq;
  seq.tokens = kPrompt;
  seq.block_table = {0};
  std::vector<float> logits;
  EXPECT_TRUE(llama->Forward(engine::StepBatch{{seq}}, &logits).ok());
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TEST(CheckMinWorldSizeTest, TheFullWorldOrOneToTheWorkers) {
  EXPECT_TRUE(CheckMinWorldSize(-1, 3).ok());
  EXPECT_TRUE(CheckMinWorldSize(1, 3).ok());
  EXPECT_TRUE(CheckMinWorldSize(3, 3).ok());
  for (int bad : {0, 4, -2}) {
    const absl::Status status = CheckMinWorldSize(bad, 3);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << bad;
    EXPECT_NE(status.message().find("--min_world_size"), std::string::npos) << status;
    EXPECT_NE(status.message().find("[1, 3]"), std::string::npos) << status;
  }
}

TEST(ParseWorkerListTest, ParsesAndRefuses) {
  EXPECT_EQ(ParseWorkerList("a:1, b:2").value(), (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseWorkerList("").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseWorkerList("a:1,b").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseWorkerList("a:99999").status()));
}

TEST(WorkerPoolTest, WorldOfOneSamplesLikeInProcess) {
  auto worker = StartWorker();
  WorkerPool pool(PoolOptions({worker.get()}));
  ASSERT_TRUE(pool.Start().ok()) << pool.status();
  EXPECT_GT(pool.kv_blocks(), 0);
  EXPECT_EQ(pool.vocab_size(), 49152);
  absl::StatusOr<StepOutcome> outcome = pool.RunStep(PrefillStep(1));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ASSERT_EQ(outcome->result.tokens_size(), 1);
  const tpserve::v1::SampledToken& t = outcome->result.tokens(0);
  EXPECT_EQ(t.seq_id(), 7u);
  EXPECT_EQ(t.token_id(), InProcessArgmax());
  EXPECT_EQ(t.top_token_ids_size(), 2);
  EXPECT_EQ(t.top_token_ids(0), t.token_id());
  EXPECT_GT(outcome->compute_ns[0], 0u);
  pool.Shutdown("test done");
  EXPECT_TRUE(absl::IsUnavailable(pool.RunStep(PrefillStep(2)).status()));
  // The worker is free again: a new world starts on it.
  WorkerPool again(PoolOptions({worker.get()}));
  EXPECT_TRUE(again.Start().ok()) << again.status();
}

TEST(WorkerPoolTest, RendezvousTravelsThroughTheCoordinatorStore) {
  worker::WorkerServiceOptions options;
  options.comm_factory =
      [](comm::Store* store,
         const worker::CommSpec& spec) -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
    // What Gloo does: publish, count, then read back through the coordinator.
    if (absl::Status s = store->Set(spec.prefix + "addr/0", "here"); !s.ok()) return s;
    absl::StatusOr<int64_t> n = store->Add(spec.prefix + "joined", 1);
    if (!n.ok()) return n.status();
    if (*n != 1) return absl::InternalError(absl::StrCat("joined = ", *n));
    if (absl::Status s = store->Wait({spec.prefix + "addr/0"}, absl::Seconds(1)); !s.ok()) return s;
    absl::StatusOr<std::string> v = store->Get(spec.prefix + "addr/0", absl::Seconds(1));
    if (!v.ok()) return v.status();
    if (*v != "here") return absl::InternalError("store value lost");
    return std::make_unique<comm::SingleRankCommunicator>();
  };
  auto worker = StartWorker(std::move(options));
  WorkerPool pool(PoolOptions({worker.get()}));
  ASSERT_TRUE(pool.Start().ok()) << pool.status();
  EXPECT_EQ(pool.generation(), 1u);
  // A second generation on the same pool: keys of generation 1 never match (joined == 1).
  ASSERT_TRUE(pool.Start().ok()) << pool.status();
  EXPECT_EQ(pool.generation(), 2u);
}

TEST(WorkerPoolTest, InitErrorsSurfaceWithTheRank) {
  auto worker = StartWorker();
  WorkerPoolOptions options = PoolOptions({worker.get()});
  options.model_path = "/nonexistent/model.gguf";
  WorkerPool pool(options);
  absl::Status status = pool.Start();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("rank 0"), std::string::npos) << status;
  EXPECT_NE(status.message().find("is not a readable model"), std::string::npos) << status;
  EXPECT_TRUE(absl::IsUnavailable(pool.RunStep(PrefillStep(1)).status()));
}

TEST(WorkerPoolTest, ASecondCoordinatorOfAnEarlierOrEqualEpochIsRefused) {
  auto worker = StartWorker();
  WorkerPoolOptions options = PoolOptions({worker.get()});
  options.coordinator_epoch = 2000;
  WorkerPool first(options);
  ASSERT_TRUE(first.Start().ok()) << first.status();
  for (const auto& [epoch, why] : {std::pair<uint64_t, std::string>{2000, "already serves"},
                                   {1000, "a coordinator with a later epoch (2000)"}}) {
    options.coordinator_epoch = epoch;
    WorkerPool second(options);
    absl::Status status = second.Start();
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find("rank 0"), std::string::npos) << status;
    EXPECT_NE(status.message().find(why), std::string::npos) << status;
  }
  EXPECT_TRUE(first.RunStep(PrefillStep(1)).ok());  // the first world is untouched
}

TEST(WorkerPoolTest, ACoordinatorOfALaterEpochTakesTheWorkersOver) {
  auto worker = StartWorker();
  WorkerPoolOptions options = PoolOptions({worker.get()});
  options.coordinator_epoch = 1000;
  WorkerPool first(options);
  ASSERT_TRUE(first.Start().ok()) << first.status();
  options.coordinator_epoch = 2000;
  WorkerPool second(options);
  ASSERT_TRUE(second.Start().ok()) << second.status();
  EXPECT_TRUE(second.RunStep(PrefillStep(1)).ok());
  EXPECT_FALSE(first.RunStep(PrefillStep(2)).ok());  // the old world is gone
  EXPECT_NE(first.status().message().find("superseded"), std::string::npos) << first.status();
  EXPECT_FALSE(first.Start().ok()) << "an earlier coordinator took the workers back";
  EXPECT_TRUE(second.RunStep(PrefillStep(3)).ok());
  second.Shutdown("test: between two worlds");  // the worker is free, and still refuses it
  const absl::Status back = first.Start();
  EXPECT_FALSE(back.ok());
  EXPECT_NE(back.message().find("has taken this worker over"), std::string::npos) << back;
  EXPECT_TRUE(second.Start().ok()) << second.status();
}

TEST(WorkerPoolTest, UnreachableWorkerIsReportedNotAwaited) {
  auto worker = StartWorker();
  const int port = worker->port();
  worker.reset();  // nobody listens there now
  WorkerPoolOptions options;
  options.workers = {absl::StrCat("127.0.0.1:", port)};
  options.model_path = kModel;
  WorkerPool pool(options);
  const absl::Time start = absl::Now();
  absl::Status status = pool.Start();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("rank 0"), std::string::npos) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(WorkerPoolTest, KilledWorkerMarksTheWorldDownWithItsRank) {
  auto worker = StartWorker();
  WorkerPool pool(PoolOptions({worker.get()}));
  ASSERT_TRUE(pool.Start().ok()) << pool.status();
  worker->Shutdown(absl::ZeroDuration());  // the worker goes away: its stream breaks
  const absl::Time start = absl::Now();
  absl::StatusOr<StepOutcome> outcome = pool.RunStep(PrefillStep(1));
  EXPECT_TRUE(absl::IsUnavailable(outcome.status())) << outcome.status();
  EXPECT_NE(outcome.status().message().find("rank 0"), std::string::npos) << outcome.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(pool.status()));
}

// Workers of this host map the link: Steps go there (received = started: no hand-off), and a
// Step too large for it, or a pool that does not offer it, takes the streams, with the same
// result.
TEST(WorkerPoolTest, StepsTakeTheLinkOrTheStreamsWithTheSameResult) {
  auto worker = StartWorker();
  std::vector<tpserve::v1::SampledToken> tokens;
  for (bool offer_link : {true, false}) {
    WorkerPoolOptions options = PoolOptions({worker.get()});
    options.step_link = offer_link;
    WorkerPool pool(options);
    ASSERT_TRUE(pool.Start().ok()) << pool.status();
    EXPECT_EQ(pool.steps_over_link(), offer_link);
    absl::StatusOr<StepOutcome> outcome = pool.RunStep(PrefillStep(1));
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    ASSERT_EQ(outcome->result.tokens_size(), 1);
    tokens.push_back(outcome->result.tokens(0));
    ASSERT_EQ(outcome->times.size(), 1u);
    EXPECT_EQ(outcome->times[0].received == outcome->times[0].started, offer_link);
    if (!offer_link) continue;
    // 5 M one-byte penalty ids: a Step over the link's 4 MiB (penalties off, so unused).
    tpserve::v1::Step big = PrefillStep(2);
    big.mutable_sequences(0)->mutable_penalty_token_ids()->Resize(5 << 20, 5);
    ASSERT_GT(big.ByteSizeLong(), static_cast<size_t>(comm::ShmStepLink::kStepBytes));
    absl::StatusOr<StepOutcome> streamed = pool.RunStep(big);
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    EXPECT_NE(streamed->times[0].received, streamed->times[0].started) << "not on the link";
    ASSERT_EQ(streamed->result.tokens_size(), 1);
    EXPECT_EQ(streamed->result.tokens(0).token_id(), tokens.front().token_id());
    absl::StatusOr<StepOutcome> next = pool.RunStep(PrefillStep(3));  // back on the link
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(next->times[0].received, next->times[0].started);
  }
  EXPECT_EQ(tokens[0].token_id(), tokens[1].token_id());
  EXPECT_EQ(tokens[0].logprob(), tokens[1].logprob());
  EXPECT_EQ(tokens[0].top_token_ids(1), tokens[1].top_token_ids(1));
}

// A step's masks go to rank 0 after the Step: on the link, on rank 0's stream when they are
// too large for the link, or on the streams; each way rank 0 samples within them, and every
// rank had the Step before the masks were done (they are computed during the forward pass).
TEST(WorkerPoolTest, MasksFollowTheStepToRankZeroAloneAndBindItsSample) {
  auto w0 = StartWorker();
  auto w1 = StartWorker();
  const int32_t argmax = InProcessArgmax();
  const int32_t only = argmax == 42 ? 43 : 42;  // a token greedy would not take
  struct Route {
    bool step_link;
    int64_t link_masks_bytes;
  };
  for (const Route route : {Route{true, comm::ShmStepLink::kMasksBytes}, Route{true, 0},
                            Route{false, comm::ShmStepLink::kMasksBytes}}) {
    SCOPED_TRACE(absl::StrCat("link ", route.step_link, ", masks ", route.link_masks_bytes));
    WorkerPoolOptions options = PoolOptions({w0.get(), w1.get()});
    options.step_link = route.step_link;
    options.link_masks_bytes = route.link_masks_bytes;
    WorkerPool pool(options);
    ASSERT_TRUE(pool.Start().ok()) << pool.status();
    for (uint64_t id = 1; id <= 3; ++id) {  // masked, plain, masked: the link's slot reused
      tpserve::v1::Step step = PrefillStep(id);
      const bool masked = id != 2;
      step.set_masks_follow(masked);
      int64_t masks_done = 0;
      auto fill = [&](tpserve::v1::StepMasks* masks) {
        absl::SleepFor(absl::Milliseconds(100));
        std::string bits(49152 / 8, '\0');
        bits[only / 8] = static_cast<char>(1 << (only % 8));
        tpserve::v1::SequenceMask* mask = masks->add_masks();
        mask->set_seq_id(7);
        mask->set_allowed_tokens(bits);
        masks_done = absl::GetCurrentTimeNanos();
      };
      absl::StatusOr<StepOutcome> outcome = pool.RunStep(step, fill);
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      ASSERT_EQ(outcome->result.tokens_size(), 1);
      EXPECT_EQ(outcome->result.tokens(0).token_id(), masked ? only : argmax);
      if (!masked) continue;
      for (const RankStepTimes& t : outcome->times) EXPECT_LT(t.received, masks_done);
    }
  }
  // Masks a worker refuses (a sequence not in the step) fail the step, naming the field.
  WorkerPool pool(PoolOptions({w0.get(), w1.get()}));
  ASSERT_TRUE(pool.Start().ok()) << pool.status();
  tpserve::v1::Step step = PrefillStep(1);
  step.set_masks_follow(true);
  absl::StatusOr<StepOutcome> refused =
      pool.RunStep(step, [](tpserve::v1::StepMasks* masks) { masks->add_masks()->set_seq_id(99); });
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "rank 0: INVALID_ARGUMENT: StepMasks: masks[0]: seq_id 99 is not a sampling "
                "sequence of step 1"),
            std::string::npos)
      << refused.status();
  step.set_step_id(2);  // masks_follow with nothing to fill them: refused before it is sent
  EXPECT_TRUE(absl::IsInvalidArgument(pool.RunStep(step).status()));
}

TEST(WorkerPoolTest, WorldOfTwoThenRankOneDies) {
  auto w0 = StartWorker();
  auto w1 = StartWorker();
  WorkerPool pool(PoolOptions({w0.get(), w1.get()}));
  ASSERT_TRUE(pool.Start().ok()) << pool.status();
  absl::StatusOr<StepOutcome> outcome = pool.RunStep(PrefillStep(1));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ASSERT_EQ(outcome->result.tokens_size(), 1);
  EXPECT_EQ(outcome->result.tokens(0).token_id(), InProcessArgmax());
  ASSERT_EQ(outcome->comm_ns.size(), 2u);
  EXPECT_GT(outcome->comm_ns[1], 0u);  // rank 1 took part in the collectives

  w1->Shutdown(absl::ZeroDuration());
  const absl::Time start = absl::Now();
  absl::StatusOr<StepOutcome> after = pool.RunStep(PrefillStep(2));
  EXPECT_FALSE(after.ok());
  EXPECT_NE(after.status().message().find("rank 1"), std::string::npos) << after.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_TRUE(absl::IsUnavailable(pool.RunStep(PrefillStep(3)).status()));
}

TEST(WorkerPoolTest, StepPastItsDeadlineFailsAndLaterStepsFailFast) {
  worker::WorkerServiceOptions options;
  options.comm_factory =
      [](comm::Store*,
         const worker::CommSpec&) -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
    return std::make_unique<StallingCommunicator>(absl::Seconds(60));
  };
  auto worker = StartWorker(std::move(options));
  WorkerPool pool(PoolOptions({worker.get()}));
  ASSERT_TRUE(pool.Start().ok()) << pool.status();
  tpserve::v1::Step step = PrefillStep(1);
  step.set_deadline_ms(300);
  const absl::Time start = absl::Now();
  absl::StatusOr<StepOutcome> outcome = pool.RunStep(step);
  EXPECT_TRUE(absl::IsDeadlineExceeded(outcome.status())) << outcome.status();
  EXPECT_NE(outcome.status().message().find("rank 0"), std::string::npos) << outcome.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  const absl::Time again = absl::Now();
  EXPECT_TRUE(absl::IsUnavailable(pool.RunStep(PrefillStep(2)).status()));
  EXPECT_LT(absl::Now() - again, absl::Milliseconds(100));
  // The stalled worker was cancelled (its communicator aborted): it serves a new world.
  WorkerPool next(PoolOptions({worker.get()}));
  EXPECT_TRUE(next.Start().ok()) << next.status();
}

}  // namespace
}  // namespace tpserve::coordinator
