// BatchEngine against a real world of one in-process worker serving SmolLM2: streamed
// messages and finish reasons, batched requests equal to each alone, cancellation freeing
// the batch, queue and drain refusals. Then against a scripted fake world (a StepExecutor):
// the steps it is asked for, recovery from a failed step, and the one-shot mode of
// `tpserve generate` where the world's error ends the run.
#include "server/coordinator/batch_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "kernels/kv_block.h"
#include "server/coordinator/request_validator.h"
#include "server/coordinator/worker_pool.h"
#include "server/protocol/step_codec.h"
#include "server/worker/worker_server.h"

namespace tpserve::coordinator {
namespace {

const std::string kModel = TPSERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Records what the engine delivers; Wait() blocks (bounded) until Close.
class RecordingSink final : public ResponseSink {
 public:
  void Send(tpserve::v1::GenerateResponse message) override {
    absl::MutexLock lock(&mu_);
    messages_.push_back(std::move(message));
  }
  void Close(const absl::Status& status) override {
    if (on_close_) on_close_();
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(closed_.has_value()) << "closed twice";
    closed_ = status;
  }
  bool cancelled() const override { return cancelled_.load(); }
  void Cancel() { cancelled_.store(true); }
  // Runs inside Close, before the waiter wakes: what a client sees the moment its stream ends.
  void OnClose(std::function<void()> hook) { on_close_ = std::move(hook); }

  absl::Status Wait(absl::Duration timeout = absl::Seconds(120)) {
    absl::MutexLock lock(&mu_);
    auto closed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_.has_value(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&closed), timeout)) {
      return absl::DeadlineExceededError("the sink was never closed");
    }
    return *closed_;
  }
  size_t count() const {
    absl::MutexLock lock(&mu_);
    return messages_.size();
  }
  std::vector<int32_t> ids() const {
    absl::MutexLock lock(&mu_);
    std::vector<int32_t> out;
    for (const auto& m : messages_)
      out.insert(out.end(), m.token_ids().begin(), m.token_ids().end());
    return out;
  }
  std::string text() const {
    absl::MutexLock lock(&mu_);
    std::string out;
    for (const auto& m : messages_) out += m.text();
    return out;
  }
  std::vector<tpserve::v1::GenerateResponse> messages() const {
    absl::MutexLock lock(&mu_);
    return messages_;
  }
  tpserve::v1::GenerateResponse last() const {
    absl::MutexLock lock(&mu_);
    return messages_.empty() ? tpserve::v1::GenerateResponse() : messages_.back();
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<tpserve::v1::GenerateResponse> messages_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> closed_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> cancelled_{false};
  std::function<void()> on_close_;  // set before Submit, only read by the engine thread
};

class BatchEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tokenizer = model::Tokenizer::Load(kModel);
    if (!tokenizer.ok()) GTEST_SKIP() << "no model: " << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    worker::WorkerServiceOptions options;
    options.model_root = *worker::ModelRoot::Open("/");  // the test model lives anywhere
    auto worker = worker::WorkerServer::Start("127.0.0.1:0", std::move(options));
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = *std::move(worker);
  }
  void TearDown() override {
    if (engine_ != nullptr) engine_->Stop();
    if (pool_ != nullptr) pool_->Shutdown("test over");
  }

  void StartEngine(BatchEngineOptions options = {}) {
    WorkerPoolOptions pool;
    pool.workers = {absl::StrCat("127.0.0.1:", worker_->port())};
    pool.model_path = kModel;
    pool.kv_budget_bytes = 16 << 20;
    pool.threads = 2;
    pool_ = std::make_unique<WorkerPool>(pool);
    metrics_ = std::make_unique<ServingMetrics>(registry_, 1);
    engine_ = std::make_unique<BatchEngine>(options, pool_.get(), *tokenizer_, metrics_.get(),
                                            [this](bool ready) { ready_changes_.fetch_add(1); });
    engine_->Start();
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!engine_->stats().ready && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(10));
    ASSERT_TRUE(engine_->stats().ready);
  }

  RequestSpec Greedy(const std::string& prompt, int64_t max_tokens) {
    RequestSpec spec;
    spec.prompt = *tokenizer_->Encode(prompt, true);
    spec.max_tokens = max_tokens;
    spec.sampling.temperature = 0;
    spec.ignore_eos = true;
    return spec;
  }

  absl::Status Run(RequestSpec spec, const std::shared_ptr<RecordingSink>& sink) {
    absl::Status submitted = engine_->Submit(std::move(spec), sink);
    if (!submitted.ok()) return submitted;
    return sink->Wait();
  }

  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<worker::WorkerServer> worker_;
  std::unique_ptr<WorkerPool> pool_;
  prometheus::Registry registry_;
  std::unique_ptr<ServingMetrics> metrics_;
  std::unique_ptr<BatchEngine> engine_;
  std::atomic<int> ready_changes_{0};
};

// Admission (not the gRPC service) names the requests that have no id and draws the seeds of
// those that set none: the same seed gives the same sampled tokens, drawn seeds differ.
TEST_F(BatchEngineTest, AdmissionNamesRequestsAndDrawsSeeds) {
  StartEngine();
  const auto sampled = [&](std::optional<uint64_t> seed) {
    RequestSpec spec = Greedy("Once upon a time", 12);
    spec.sampling.temperature = 1.5f;
    spec.seed = seed;
    auto sink = std::make_shared<RecordingSink>();
    EXPECT_TRUE(Run(spec, sink).ok());
    return std::make_pair(sink->last().request_id(), sink->ids());
  };
  const auto [first_id, first] = sampled(std::nullopt);
  const auto [second_id, second] = sampled(std::nullopt);
  EXPECT_EQ(first_id, "req-1");
  EXPECT_EQ(second_id, "req-2");
  EXPECT_NE(first, second) << "two drawn seeds gave the same 12 sampled tokens";
  EXPECT_EQ(sampled(uint64_t{7}).second, sampled(uint64_t{7}).second);
}

TEST_F(BatchEngineTest, StreamsOneMessagePerTokenThenFinishes) {
  StartEngine();
  auto sink = std::make_shared<RecordingSink>();
  RequestSpec spec = Greedy("The capital of France is", 5);
  spec.request_id = "r1";
  EngineStats at_close;
  uint64_t durations_at_close = 0;
  sink->OnClose([&] {
    at_close = engine_->stats();
    durations_at_close = metrics_->request_duration.Collect().histogram.sample_count;
  });
  ASSERT_TRUE(Run(spec, sink).ok());
  // Settled before the stream ends, not some time after.
  EXPECT_EQ(at_close.kv_blocks_free, at_close.kv_blocks_total);
  EXPECT_EQ(at_close.running, 0);
  EXPECT_EQ(durations_at_close, 1u);
  EXPECT_EQ(sink->count(), 5u);
  EXPECT_EQ(sink->ids().size(), 5u);
  EXPECT_EQ(sink->ids()[0], 7042) << "greedy continuation should start with ' Paris'";
  const tpserve::v1::GenerateResponse last = sink->last();
  EXPECT_EQ(last.finish_reason(), tpserve::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().completion_tokens(), 5u);
  EXPECT_EQ(last.usage().prompt_tokens(), spec.prompt.size());
  EXPECT_EQ(last.request_id(), "r1");
  EXPECT_EQ(sink->text(), *tokenizer_->Decode(sink->ids(), true));
  EXPECT_EQ(engine_->stats().kv_blocks_free, engine_->stats().kv_blocks_total);
  EXPECT_EQ(metrics_->generated_tokens.Value(), 5);
  EXPECT_EQ(metrics_->prompt_tokens.Value(), static_cast<double>(spec.prompt.size()));
  EXPECT_EQ(metrics_->time_to_first_token.Collect().histogram.sample_count, 1u);
  EXPECT_EQ(metrics_->inter_token_latency.Collect().histogram.sample_count, 4u);
  EXPECT_EQ(metrics_->request_duration.Collect().histogram.sample_count, 1u);
}

TEST_F(BatchEngineTest, StopStringEndsTheStreamBeforeIt) {
  StartEngine();
  auto full = std::make_shared<RecordingSink>();
  ASSERT_TRUE(Run(Greedy("The capital of France is", 8), full).ok());
  const std::string text = full->text();
  ASSERT_GT(text.size(), 6u);
  RequestSpec spec = Greedy("The capital of France is", 8);
  spec.stop = {text.substr(3, 4)};
  auto stopped = std::make_shared<RecordingSink>();
  ASSERT_TRUE(Run(spec, stopped).ok());
  EXPECT_EQ(stopped->text(), text.substr(0, 3));
  EXPECT_EQ(stopped->last().finish_reason(), tpserve::v1::FINISH_REASON_STOP);
}

TEST_F(BatchEngineTest, AResumedStreamContinuesExactlyWhereTheClientLeftIt) {
  StartEngine();
  RequestSpec spec = Greedy("Once upon a time", 24);
  spec.sampling.temperature = 1.2f;
  spec.sampling.top_p = 0.9f;
  spec.sampling.frequency_penalty = 0.5f;  // counts the resumed tokens as output
  spec.stop = {" the qqq"};                // holds back text that ends in " " or " the"
  auto full = std::make_shared<RecordingSink>();
  ASSERT_TRUE(Run(spec, full).ok());
  const std::vector<tpserve::v1::GenerateResponse> messages = full->messages();
  ASSERT_EQ(messages.size(), 24u);
  ASSERT_TRUE(messages.front().has_seed()) << "the first message reports the seed";
  EXPECT_FALSE(messages[1].has_seed());
  const std::vector<int32_t> ids = full->ids();
  for (size_t k : {size_t{1}, size_t{7}, size_t{16}, size_t{23}}) {
    RequestSpec resumed = spec;
    resumed.seed = messages.front().seed();
    resumed.resumed.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k));
    auto rest = std::make_shared<RecordingSink>();
    ASSERT_TRUE(Run(resumed, rest).ok());
    EXPECT_EQ(rest->ids(),
              std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end()))
        << "after " << k;
    std::string received;
    for (size_t i = 0; i < k; ++i) received += messages[i].text();
    EXPECT_EQ(received + rest->text(), full->text()) << "after " << k;
    EXPECT_EQ(rest->last().usage().completion_tokens(), 24u);
    EXPECT_EQ(rest->last().finish_reason(), tpserve::v1::FINISH_REASON_LENGTH);
  }
}

TEST_F(BatchEngineTest, ResumingPastAStopStringEndsTheStreamWithNoText) {
  StartEngine();
  auto full = std::make_shared<RecordingSink>();
  ASSERT_TRUE(Run(Greedy("The capital of France is", 8), full).ok());
  RequestSpec spec = Greedy("The capital of France is", 8);
  spec.stop = {full->text().substr(3, 4)};
  auto stopped = std::make_shared<RecordingSink>();
  ASSERT_TRUE(Run(spec, stopped).ok());
  RequestSpec resumed = spec;
  resumed.resumed = stopped->ids();
  auto rest = std::make_shared<RecordingSink>();
  ASSERT_TRUE(Run(resumed, rest).ok());
  EXPECT_EQ(rest->count(), 1u);
  EXPECT_EQ(rest->text(), "");
  EXPECT_EQ(rest->last().finish_reason(), tpserve::v1::FINISH_REASON_STOP);
  EXPECT_EQ(engine_->stats().kv_blocks_free, engine_->stats().kv_blocks_total);
}

TEST_F(BatchEngineTest, BatchedRequestsEqualEachAlone) {
  BatchEngineOptions options;
  options.scheduler.max_batch_tokens = 16;  // prompts are prefilled in chunks beside decodes
  StartEngine(options);
  const std::vector<std::string> prompts = {"Hello",
                                            "The capital of France is",
                                            "Once upon a time, in a land far away,",
                                            "1, 2, 3, 4,",
                                            "def main():",
                                            "The weather today"};
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto sink = std::make_shared<RecordingSink>();
    ASSERT_TRUE(Run(Greedy(prompts[i], 4 + static_cast<int64_t>(i)), sink).ok());
    alone.push_back(sink->ids());
  }
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (size_t i = 0; i < prompts.size(); ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(engine_->Submit(Greedy(prompts[i], 4 + static_cast<int64_t>(i)), sinks[i]).ok());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(sinks[i]->Wait().ok());
    EXPECT_EQ(sinks[i]->ids(), alone[i]) << "request " << i;
  }
}

TEST_F(BatchEngineTest, CancelledRequestLeavesTheBatchAndFreesItsBlocks) {
  StartEngine();
  auto sink = std::make_shared<RecordingSink>();
  const absl::Status submitted = engine_->Submit(Greedy("Tell me a long story.", 300), sink);
  ASSERT_TRUE(submitted.ok()) << submitted;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (sink->count() < 3 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_GE(sink->count(), 3u);
  sink->Cancel();
  EXPECT_EQ(sink->Wait(absl::Seconds(10)).code(), absl::StatusCode::kCancelled);
  EXPECT_LT(sink->count(), 300u);
  ASSERT_TRUE(engine_->AwaitIdle(absl::Seconds(5)));
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (engine_->stats().running > 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(engine_->stats().running, 0);
  EXPECT_EQ(engine_->stats().kv_blocks_free, engine_->stats().kv_blocks_total);
}

TEST_F(BatchEngineTest, RefusesWhenTheQueueIsFullOrTheRequestCannotFit) {
  BatchEngineOptions options;
  options.max_queue = 0;
  StartEngine(options);
  absl::Status s = engine_->Submit(Greedy("Hi", 2), std::make_shared<RecordingSink>());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("max_queue 0"), std::string::npos) << s;
}

TEST_F(BatchEngineTest, RequestLargerThanTheKvCacheIsInvalid) {
  StartEngine();
  const EngineStats stats = engine_->stats();
  const int64_t capacity = stats.kv_blocks_total * stats.kv_block_size;
  absl::Status s = engine_->Submit(Greedy("Hi", capacity), std::make_shared<RecordingSink>());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(absl::StrCat(capacity, " tokens")), std::string::npos) << s;
}

TEST_F(BatchEngineTest, DrainRefusesNewRequestsAndLetsRunningOnesFinish) {
  StartEngine();
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Greedy("Count with me: one, two,", 12), running).ok());
  engine_->Drain();
  EXPECT_FALSE(engine_->stats().ready);
  absl::Status s = engine_->Submit(Greedy("Hi", 2), std::make_shared<RecordingSink>());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(engine_->AwaitIdle(absl::Seconds(60)));
  EXPECT_TRUE(running->Wait().ok());
  EXPECT_EQ(running->ids().size(), 12u);
}

// A fake world through the same StepExecutor interface: rank 0 "samples" the sequence's
// sample_index-th token of a script; steps can be made to fail, and starts to be refused.
class ScriptedWorld final : public StepExecutor {
 public:
  explicit ScriptedWorld(std::vector<int32_t> script) : script_(std::move(script)) {}

  absl::Status Start() override {
    absl::MutexLock lock(&mu_);
    ++starts_;
    up_ = start_error_.ok();
    return start_error_;
  }
  absl::Status health() const override {
    absl::MutexLock lock(&mu_);
    return up_ ? absl::OkStatus() : absl::UnavailableError("the world is down");
  }
  using StepExecutor::RunStep;
  absl::StatusOr<StepOutcome> RunStep(const tpserve::v1::Step& step,
                                      const StepMaskFill& masks) override {
    absl::MutexLock lock(&mu_);
    if (step.masks_follow()) {
      tpserve::v1::StepMasks filled;
      masks(&filled);
      // Each verified position of each masked sequence: (draft_tokens, positions masked).
      for (const tpserve::v1::StepSequence& seq : step.sequences()) {
        std::vector<uint32_t> positions;
        for (const tpserve::v1::SequenceMask& m : filled.masks()) {
          if (m.seq_id() == seq.seq_id()) positions.push_back(m.position());
        }
        if (!positions.empty() || seq.draft_tokens() > 0) {
          masked_.emplace_back(seq.draft_tokens(), std::move(positions));
        }
      }
    }
    if (!up_) return absl::UnavailableError("the world is down");
    if (throw_steps_ > 0) {
      --throw_steps_;
      throw std::length_error("injected: a bug that throws mid-step");
    }
    if (fail_steps_ > 0) {
      --fail_steps_;
      up_ = false;
      return absl::InternalError("rank 0: injected step failure");
    }
    if (fail_after_success_ > 0 && !last_failed_) {
      --fail_after_success_;
      last_failed_ = true;
      up_ = false;
      return absl::UnavailableError("rank 1: injected death");
    }
    last_failed_ = false;
    StepOutcome outcome;
    for (const tpserve::v1::StepSequence& seq : step.sequences()) {
      steps_.push_back({seq.start_pos(), seq.token_ids_size()});
      if (!seq.sample()) continue;
      engine::SampleResult drawn;
      drawn.token_id = script_[seq.sample_index() % script_.size()];
      protocol::AddSampledToken(seq.seq_id(), drawn, &outcome.result);
    }
    return outcome;
  }
  int64_t kv_blocks() const override { return 64; }
  int64_t kv_block_size() const override { return kKvBlockSize; }
  std::string comm_backend() const override { return "fake"; }

  void FailNextSteps(int n) {
    absl::MutexLock lock(&mu_);
    fail_steps_ = n;
  }
  void ThrowInNextSteps(int n) {
    absl::MutexLock lock(&mu_);
    throw_steps_ = n;
  }
  // The next `n` steps that follow a successful one fail (the world going down each time).
  void FailEveryOtherStep(int n) {
    absl::MutexLock lock(&mu_);
    fail_after_success_ = n;
  }
  // The world goes down between steps (a worker found hung while idle).
  void GoDown() {
    absl::MutexLock lock(&mu_);
    up_ = false;
  }
  void RefuseStarts(absl::Status error) {
    absl::MutexLock lock(&mu_);
    start_error_ = std::move(error);
  }
  int starts() const {
    absl::MutexLock lock(&mu_);
    return starts_;
  }
  // Per masked or drafting sequence of each step: its draft_tokens and masked positions.
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> masked() const {
    absl::MutexLock lock(&mu_);
    return masked_;
  }
  // (start_pos, tokens) of every sequence of every step that ran.
  std::vector<std::pair<int64_t, int>> steps() const {
    absl::MutexLock lock(&mu_);
    return steps_;
  }

 private:
  const std::vector<int32_t> script_;
  mutable absl::Mutex mu_;
  bool up_ ABSL_GUARDED_BY(mu_) = false;
  int starts_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int throw_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_after_success_ ABSL_GUARDED_BY(mu_) = 0;
  bool last_failed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status start_error_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, int>> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> masked_ ABSL_GUARDED_BY(mu_);
};

class BatchEngineFakeWorldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tokenizer = model::Tokenizer::Load(kModel);
    if (!tokenizer.ok()) GTEST_SKIP() << "no model: " << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    script_ = *tokenizer_->Encode(" one two three four five six seven eight", false);
    world_ = std::make_unique<ScriptedWorld>(script_);
    metrics_ = std::make_unique<ServingMetrics>(registry_, 1);
  }
  void TearDown() override {
    if (engine_ != nullptr) engine_->Stop();
  }
  absl::Status StartEngine(BatchEngineOptions options) {
    options.restart_backoff = absl::Milliseconds(10);
    engine_ =
        std::make_unique<BatchEngine>(options, world_.get(), *tokenizer_, metrics_.get(), nullptr);
    engine_->Start();
    return engine_->AwaitReady(absl::Seconds(30));
  }
  RequestSpec Spec(int64_t prompt_tokens, int64_t max_tokens) {
    RequestSpec spec;
    spec.prompt.assign(static_cast<size_t>(prompt_tokens), script_[0]);
    spec.max_tokens = max_tokens;
    spec.ignore_eos = true;
    return spec;
  }

  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::vector<int32_t> script_;
  std::unique_ptr<ScriptedWorld> world_;
  prometheus::Registry registry_;
  std::unique_ptr<ServingMetrics> metrics_;
  std::unique_ptr<BatchEngine> engine_;
};

TEST_F(BatchEngineFakeWorldTest, ChunkedPrefillThenOneTokenAStepUntilTheStopString) {
  BatchEngineOptions options;
  options.scheduler.max_batch_tokens = 4;
  ASSERT_TRUE(StartEngine(options).ok());
  RequestSpec spec = Spec(10, 8);
  spec.stop = {" four"};
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(std::move(spec), sink).ok());
  ASSERT_TRUE(sink->Wait().ok());
  EXPECT_EQ(sink->text(), " one two three");
  EXPECT_EQ(sink->last().finish_reason(), tpserve::v1::FINISH_REASON_STOP);
  EXPECT_EQ(sink->ids().size(), 4u);  // " four" was drawn, its text held back
  const std::vector<std::pair<int64_t, int>> want = {{0, 4},  {4, 4},  {8, 2},
                                                     {10, 1}, {11, 1}, {12, 1}};
  EXPECT_EQ(world_->steps(), want);
}

// Speculating under a grammar: a request that verifies K proposals gets a mask at each of
// its K + 1 positions; one whose masks miss the budget gets none, and ends with the error.
TEST_F(BatchEngineFakeWorldTest, UnderAGrammarEachVerifiedPositionIsMaskedOrNone) {
  BatchEngineOptions options;
  options.speculative.mode = SpeculativeMode::kNgram;
  ASSERT_TRUE(StartEngine(options).ok());
  RequestValidator validator(*tokenizer_, nullptr, ServingLimits{});
  tpserve::v1::GenerateRequest request;
  // The script twice: the output (the script) repeats the prompt, so ngram proposes it.
  request.set_prompt(" one two three four five six seven eight one two three four five six");
  request.set_max_tokens(8);
  request.set_temperature(0);
  request.mutable_structured_output()->set_regex(
      "( one| two| three| four| five| six| seven| eight)+");
  absl::StatusOr<RequestSpec> spec = validator.Validate(request);
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->ignore_eos = true;
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(*spec, sink).ok());
  const absl::Status done = sink->Wait();
  ASSERT_TRUE(done.ok()) << done;
  EXPECT_EQ(sink->text(), " one two three four five six seven eight");
  const auto masked = world_->masked();
  ASSERT_FALSE(masked.empty());
  int drafting = 0;
  for (const auto& [draft, positions] : masked) {
    std::vector<uint32_t> want(draft + 1);
    for (uint32_t p = 0; p <= draft; ++p) want[p] = p;
    EXPECT_EQ(positions, want) << "draft_tokens " << draft;
    drafting += draft > 0 ? 1 : 0;
  }
  EXPECT_GT(drafting, 0) << "no step verified proposals under the grammar";

  options.mask_budget = absl::ZeroDuration();
  engine_->Stop();
  world_ = std::make_unique<ScriptedWorld>(script_);
  ASSERT_TRUE(StartEngine(options).ok());
  // A grammar compiled afresh (the first one's masks are cached), wide enough that its mask
  // walks most of the vocabulary and so looks at the clock.
  RequestValidator fresh(*tokenizer_, nullptr, ServingLimits{});
  request.mutable_structured_output()->set_regex("[a-z ]+");
  spec = fresh.Validate(request);
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->ignore_eos = true;
  sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(*spec, sink).ok());
  EXPECT_EQ(sink->Wait().code(), absl::StatusCode::kResourceExhausted);
  for (const auto& [draft, positions] : world_->masked()) {
    EXPECT_TRUE(positions.empty()) << "a mask past the budget was sent";
  }
}

TEST_F(BatchEngineFakeWorldTest, AFailedStepIsRecomputedOnANewWorld) {
  ASSERT_TRUE(StartEngine({}).ok());
  auto alone = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Spec(3, 6), alone).ok());
  ASSERT_TRUE(alone->Wait().ok());
  world_->FailNextSteps(1);
  auto recovered = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Spec(3, 6), recovered).ok());
  ASSERT_TRUE(recovered->Wait().ok());
  EXPECT_EQ(recovered->ids(), alone->ids());
  EXPECT_EQ(world_->starts(), 2);
  EXPECT_TRUE(engine_->fatal().ok());
}

// A step that throws (a bug) fails the requests in flight with Internal, the world is
// rebuilt, and the engine serves on (issue 37: nothing a thread throws ends the process).
TEST_F(BatchEngineFakeWorldTest, AStepThatThrowsFailsItsRequestsAndTheEngineServesOn) {
  ASSERT_TRUE(StartEngine({}).ok());
  world_->ThrowInNextSteps(1);
  auto thrown = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Spec(3, 6), thrown).ok());
  const absl::Status closed = thrown->Wait();
  EXPECT_EQ(closed.code(), absl::StatusCode::kInternal) << closed;
  EXPECT_THAT(std::string(closed.message()),
              ::testing::HasSubstr("the batch loop: ended on an exception: injected"));
  auto after = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Spec(3, 6), after).ok());
  EXPECT_TRUE(after->Wait().ok());
  EXPECT_EQ(after->ids().size(), 6u);
  EXPECT_EQ(world_->starts(), 2);
  EXPECT_TRUE(engine_->fatal().ok());
}

TEST_F(BatchEngineFakeWorldTest, ARequestLivesThroughManyWorldDeathsButNotThroughAPoisonRun) {
  BatchEngineOptions options;
  options.max_failed_steps = 2;
  ASSERT_TRUE(StartEngine(options).ok());
  auto alone = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Spec(3, 12), alone).ok());
  ASSERT_TRUE(alone->Wait().ok());
  world_->FailEveryOtherStep(6);  // each death is followed by a step that succeeds
  auto survivor = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Spec(3, 12), survivor).ok());
  ASSERT_TRUE(survivor->Wait().ok());
  EXPECT_EQ(survivor->ids(), alone->ids());
  EXPECT_EQ(world_->starts(), 7);
  world_->FailNextSteps(2);  // two failures in a row: the request is given up
  auto poison = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Spec(3, 12), poison).ok());
  const absl::Status closed = poison->Wait();
  EXPECT_TRUE(absl::IsUnavailable(closed)) << closed;
  EXPECT_THAT(std::string(closed.message()), ::testing::HasSubstr("failed 2 steps"));
}

TEST_F(BatchEngineFakeWorldTest, AWorldThatGoesDownWhileIdleIsSeenAndRebuilt) {
  ASSERT_TRUE(StartEngine({}).ok());
  ASSERT_EQ(world_->starts(), 1);
  world_->GoDown();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (world_->starts() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(world_->starts(), 2) << "the idle engine did not notice its world went down";
  ASSERT_TRUE(engine_->AwaitReady(absl::Seconds(10)).ok());
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Spec(3, 4), sink).ok());
  EXPECT_TRUE(sink->Wait().ok());
}

// One-shot (tpserve generate): the world's error ends the request and the engine.
TEST_F(BatchEngineFakeWorldTest, WithoutRestartsAFailedStepEndsTheRunWithItsError) {
  BatchEngineOptions options;
  options.restart_world = false;
  ASSERT_TRUE(StartEngine(options).ok());
  world_->FailNextSteps(1);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Spec(3, 6), sink).ok());
  const absl::Status closed = sink->Wait();
  EXPECT_TRUE(absl::IsInternal(closed)) << closed;
  EXPECT_THAT(std::string(closed.message()), ::testing::HasSubstr("injected step failure"));
  EXPECT_EQ(engine_->fatal(), closed);
  EXPECT_EQ(world_->starts(), 1);
}

TEST_F(BatchEngineFakeWorldTest, WithoutRestartsARefusedStartIsWhatAwaitReadyReturns) {
  world_->RefuseStarts(absl::UnavailableError("rank 0 (127.0.0.1:1): connection refused"));
  BatchEngineOptions options;
  options.restart_world = false;
  const absl::Status ready = StartEngine(options);
  EXPECT_TRUE(absl::IsUnavailable(ready)) << ready;
  EXPECT_THAT(std::string(ready.message()), ::testing::HasSubstr("connection refused"));
  EXPECT_EQ(world_->starts(), 1);
}

}  // namespace
}  // namespace tpserve::coordinator
