#include "server/worker/worker_session.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "server/comm/host_layout.h"
#include "server/common/catch_all.h"
#include "server/common/grpc_status.h"
#include "server/common/status_macros.h"
#include "server/model/plan/shard_plan.h"
#include "server/protocol/step_codec.h"

namespace tpserve::worker {

using tpserve::v1::CoordinatorMessage;
using tpserve::v1::Step;
using tpserve::v1::StepResult;
using tpserve::v1::WorkerMessage;

namespace {

// How long an executor with a core to spare watches the link for the next step.
constexpr absl::Duration kPollForNextStep = absl::Milliseconds(1);
// How long rank 0 waits for a step's masks when the Step names no deadline.
constexpr absl::Duration kMasksWait = absl::Seconds(60);

WorkerMessage ErrorMessage(const std::string& text) {
  WorkerMessage m;
  m.set_error(text);
  return m;
}

// The Init `first` asks for, once checked; why not otherwise.
absl::StatusOr<AcceptedInit> AcceptInit(const CoordinatorMessage& first,
                                        const WorkerServiceOptions& options) {
  if (!first.has_init()) {
    return absl::FailedPreconditionError("the first message of a Session must be Init");
  }
  InitLimits limits = options.init_limits;
  limits.max_coordinator_epoch = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) +
                                 static_cast<uint64_t>(kMaxEpochAheadNs);
  RETURN_IF_ERROR(ValidateInit(first.init(), options.device, limits));
  AcceptedInit accepted;
  accepted.world = protocol::DecodeInit(first.init());
  absl::StatusOr<std::string> model_path = options.model_root.Resolve(accepted.world.model_path);
  if (!model_path.ok()) return model_path.status();
  accepted.model_path = *std::move(model_path);
  return accepted;
}

}  // namespace

WorkerSession::WorkerSession(grpc::ServerContext* context, SessionStream* stream,
                             const WorkerServiceOptions& options, AcceptedInit init,
                             std::function<void()> on_closing)
    : context_(context),
      stream_(stream),
      options_(options),
      init_(std::move(init.world)),
      on_closing_(std::move(on_closing)),
      model_path_(std::move(init.model_path)) {
  if (init_.heartbeat_interval > absl::ZeroDuration()) {
    heartbeat_.emplace(init_.heartbeat_interval, [this] { return SendHeartbeat(); });
  }
  store_ = std::make_unique<StreamStore>(
      [this](const tpserve::v1::StoreRequest& request) {
        WorkerMessage m;
        *m.mutable_store_request() = request;
        return Write(m) ? absl::OkStatus() : absl::UnavailableError("the session stream is closed");
      },
      options_.store_op_timeout);
}

WorkerSession::~WorkerSession() {
  if (heartbeat_.has_value()) heartbeat_->Stop();
}

bool WorkerSession::Write(const WorkerMessage& message) {
  absl::MutexLock lock(&write_mu_);
  return stream_->Write(message);
}

bool WorkerSession::SendHeartbeat() {
  WorkerMessage beat;
  beat.mutable_heartbeat()->set_steps_done(steps_done_.load(std::memory_order_relaxed));
  return Write(beat);
}

absl::StatusOr<AcceptedInit> WorkerSession::ReadInit(SessionStream* stream,
                                                     const WorkerServiceOptions& options) {
  CoordinatorMessage first;
  if (!stream->Read(&first)) return absl::CancelledError("the stream ended before Init");
  absl::StatusOr<AcceptedInit> accepted = AcceptInit(first, options);
  if (!accepted.ok()) {
    LOG(WARNING) << "refusing Init: " << accepted.status() << " (--model_root "
                 << options.model_root.dir() << ")";
    stream->Write(ErrorMessage(std::string{accepted.status().message()}));
  }
  return accepted;
}

grpc::Status WorkerSession::Run() {
  LOG(INFO) << "Init: rank " << init_.rank << "/" << init_.world_size << " generation "
            << init_.world_generation << " coordinator epoch " << init_.coordinator_epoch
            << " model " << init_.model_path;
  OpenStepLink();
  std::thread executor([this] {
    // A step (from the coordinator) whose handling throws fails this session, as a refused
    // one does: the coordinator rebuilds the world, the worker process lives.
    const absl::Status ran =
        CatchAll(absl::StrCat("rank ", init_.rank, ": the session"), [this] { Execute(); });
    if (!ran.ok()) {
      Fail(absl::StrCat(ran.message()));
      ReleaseWorld();
    }
  });
  ReadUntilEnd();
  Close();
  if (heartbeat_.has_value()) heartbeat_->Stop();
  executor.join();
  if (IsSuperseded()) return ToGrpcStatus(absl::AbortedError(kSupersededMessage));
  return grpc::Status::OK;
}

void WorkerSession::Refuse(const absl::Status& refusal) {
  if (heartbeat_.has_value()) heartbeat_->Stop();
  Write(ErrorMessage(static_cast<std::string>(refusal.message())));
}

void WorkerSession::OpenStepLink() {
  if (init_.step_link.empty()) return;
  absl::StatusOr<std::unique_ptr<comm::ShmStepLink>> link =
      comm::ShmStepLink::Open(init_.step_link, init_.rank, init_.world_size);
  if (!link.ok()) {
    LOG(INFO) << "steps over the stream: " << link.status();
    return;
  }
  absl::MutexLock lock(&mu_);
  link_ = *std::move(link);
}

void WorkerSession::ReadUntilEnd() {
  CoordinatorMessage message;
  while (stream_->Read(&message)) {
    if (message.has_store_reply()) {
      store_->Deliver(message.store_reply());
      continue;
    }
    const bool shutdown = message.has_shutdown();
    if (shutdown) LOG(INFO) << "Shutdown: " << message.shutdown().reason();
    if (message.has_step() || message.has_step_masks() || message.has_init() || shutdown) {
      const int64_t received = absl::GetCurrentTimeNanos();
      {
        absl::MutexLock lock(&mu_);
        inbox_.push_back({std::move(message), received});
      }
      if (link_ != nullptr) link_->Ring();  // the executor may be waiting on the link
    }
    if (shutdown) break;
  }
  absl::MutexLock lock(&mu_);
  stream_ended_ = true;
}

void WorkerSession::Close() {
  on_closing_();
  {
    // Closed first: whatever fails from here on (a store operation, a collective) is the
    // executor's cue that the Session ended, not a failure to report.
    absl::MutexLock lock(&mu_);
    closed_ = true;
    if (comm_for_abort_ != nullptr) comm_for_abort_->Abort();
    if (link_ != nullptr) link_->Ring();
  }
  store_->Close(absl::CancelledError("the session ended"));
}

bool WorkerSession::IsClosed() {
  absl::MutexLock lock(&mu_);
  return closed_;
}

bool WorkerSession::IsSuperseded() {
  absl::MutexLock lock(&mu_);
  return superseded_;
}

void WorkerSession::Supersede() {
  {
    absl::MutexLock lock(&mu_);
    superseded_ = true;
  }
  Close();
  // The executor tells the coordinator why; one that then ends the stream sees ABORTED. One
  // that does not (hung, stopped) is cut off.
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&stream_ended_), options_.supersede_grace)) {
    context_->TryCancel();
  }
}

void WorkerSession::Fail(const std::string& message) {
  LOG(WARNING) << "session failed: " << message;
  Write(ErrorMessage(message));
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&closed_), options_.close_grace)) {
    context_->TryCancel();  // the coordinator did not close: end the stream ourselves
  }
}

absl::Status WorkerSession::BuildWorld(const protocol::WorldAssignment& init) {
  rank_ = init.rank;
  const int world = init.world_size;
  ASSIGN_OR_RETURN(weights_, model::OpenWeightSource(model_path_));
  ASSIGN_OR_RETURN(model::ShardPlan plan,
                   model::MakeShardPlan(weights_->config(), rank_, world,
                                        model::FfnSplitGranule(*weights_, world)));

  CommSpec spec;
  spec.rank = rank_;
  spec.world_size = world;
  spec.host = init.comm_host.empty() ? "127.0.0.1" : init.comm_host;
  if (init.comm_timeout > absl::ZeroDuration()) spec.timeout = init.comm_timeout;
  spec.prefix = absl::StrCat("gen", init.world_generation, "/");
  spec.backend = init.backend;
  spec.hosts.hosts = {comm::LocalHostIdentity()};
  if (world > 1) {
    absl::StatusOr<comm::HostLayout> hosts = comm::ExchangeHostIdentities(
        store_.get(), spec.prefix, rank_, world, spec.hosts.hosts.front(), spec.timeout);
    if (!hosts.ok()) {
      return absl::Status(hosts.status().code(),
                          absl::StrCat("exchanging hosts: ", hosts.status().message()));
    }
    spec.hosts = *std::move(hosts);
  }
  // Compute threads: as Init says, or this host's CPUs shared among its ranks. A rank may spin
  // while waiting for a peer only if every thread of this host's ranks has a core.
  const int cpus = comm::UsableCpus();
  const int on_host = spec.hosts.RanksOnHostOf(rank_);
  RankDevice where;
  where.device = options_.device;
  where.threads = init.threads > 0 ? static_cast<int>(init.threads) : std::max(1, cpus / on_host);
  spec.spin = on_host * where.threads <= cpus;
  // Between steps only each rank's executor runs, beside the coordinator.
  poll_for_steps_ = on_host + 1 <= cpus;
  threads_ = where.threads;
  absl::StatusOr<RankResources> rank = BuildRank(where, store_.get(), spec, options_.comm_factory);
  if (!rank.ok()) {
    return absl::Status(rank.status().code(),
                        absl::StrCat("backend and communicator: ", rank.status().message()));
  }
  backend_ = std::move(rank->backend);
  if (options_.metrics != nullptr) metrics_.emplace(options_.metrics->ForRank(rank_));
  comm_ = std::make_unique<TimedCommunicator>(std::move(rank->comm),
                                              metrics_.has_value() ? &*metrics_ : nullptr);
  {
    absl::MutexLock lock(&mu_);
    comm_for_abort_ = comm_.get();
    if (closed_) comm_->Abort();
  }

  engine::EngineOptions options;
  if (init.kv_budget_bytes > 0) {
    options.kv_budget_bytes = static_cast<int64_t>(init.kv_budget_bytes);
  }
  if (init.kv_block_size > 0) options.kv_block_size = init.kv_block_size;
  options.dequantize = init.dequantize || options_.dequantize;
  options.tp_invariant = !init.float_row_sums;
  options.cancelled = [this] { return IsClosed(); };  // the Session ended: abandon the load
  LOG(INFO) << "rank " << rank_ << ": loading weights";
  ASSIGN_OR_RETURN(model_,
                   engine::LlamaModel::Load(*weights_, plan, backend_.get(), comm_.get(), options));
  if (metrics_.has_value()) {
    metrics_->weight_bytes.Set(static_cast<double>(model_->weight_bytes()));
    metrics_->kv_cache_bytes.Set(static_cast<double>(model_->kv_bytes()));
    metrics_->threads.Set(threads_);
    options_.metrics->SetCommunicator(rank_, std::string(comm_->backend_name()));
  }
  return absl::OkStatus();
}

protocol::WorkerHoldings WorkerSession::Holdings() const {
  protocol::WorkerHoldings holdings;
  holdings.kv_blocks = model_->kv_blocks();
  holdings.weight_bytes = static_cast<uint64_t>(model_->weight_bytes());
  holdings.kv_bytes = static_cast<uint64_t>(model_->kv_bytes());
  holdings.vocab_size = static_cast<int32_t>(model_->config().vocab_size);
  holdings.comm_backend = static_cast<std::string>(comm_->backend_name());
  holdings.threads = threads_;
  holdings.step_link = link_ != nullptr;
  holdings.exact_row_sums = model_->exact_sums();
  return holdings;
}

void WorkerSession::Execute() {
  if (absl::Status built = BuildWorld(init_); !built.ok()) {
    if (IsClosed()) {  // nobody waits for this world any more
      LOG(INFO) << "rank " << init_.rank << ": building the world abandoned: " << built;
    } else {
      Fail(absl::StrCat("rank ", init_.rank, ": building the world failed: ", built.ToString()));
    }
  } else {
    WorkerMessage ready;
    *ready.mutable_ready() = protocol::EncodeReady(Holdings());
    LOG(INFO) << "Ready: rank " << rank_ << " kv_blocks " << model_->kv_blocks() << " weights "
              << model_->weight_bytes() << " B, " << threads_ << " threads, communicator "
              << comm_->backend_name() << ", steps over "
              << (link_ != nullptr ? "the shared-memory link" : "the stream");
    if (Write(ready)) ServeSteps();
  }
  if (IsSuperseded()) Write(ErrorMessage(kSupersededMessage));  // tell the coordinator why
  ReleaseWorld();
}

void WorkerSession::ReleaseWorld() {
  absl::MutexLock lock(&mu_);
  if (comm_ != nullptr) comm_->Abort();
  comm_for_abort_ = nullptr;
  model_.reset();
  comm_.reset();  // a GPU communicator borrows the backend's stream: it goes first
  backend_.reset();
  weights_.reset();
}

void WorkerSession::ServeSteps() {
  uint64_t link_step = 0;  // the last step taken from the link
  while (true) {
    const uint32_t bell = link_ != nullptr ? link_->Bell() : 0;
    std::optional<Inbound> inbound;
    {
      absl::MutexLock lock(&mu_);
      if (link_ == nullptr) {
        mu_.Await(absl::Condition(
            +[](WorkerSession* s)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->closed_ || !s->inbox_.empty(); },
            this));
      }
      if (closed_ && (inbox_.empty() || !inbox_.front().message.has_shutdown())) return;
      // The masks of a step still to come on the link (they were too large for it) wait in
      // the inbox for that step's AwaitMasks.
      const bool masks_of_a_link_step =
          !inbox_.empty() && link_ != nullptr && rank_ == 0 &&
          inbox_.front().message.has_step_masks() &&
          inbox_.front().message.step_masks().step_id() > last_step_id_;
      if (!inbox_.empty() && !masks_of_a_link_step) {
        inbound = std::move(inbox_.front());
        inbox_.pop_front();
      }
    }
    if (inbound.has_value()) {
      if (inbound->message.has_shutdown()) return;
      if (inbound->message.has_init()) {
        Fail("a second Init on one Session");
        return;
      }
      if (inbound->message.has_step_masks()) {  // outside its step
        const uint64_t id = inbound->message.step_masks().step_id();
        if (id > last_step_id_ || rank_ != 0) {
          Fail(absl::StrCat("rank ", rank_, ": a StepMasks of step ", id,
                            (rank_ != 0 ? " to a rank that does not sample" : " before its Step")));
          return;
        }
        continue;  // of a step that failed before its masks were taken
      }
      WorkerMessage result;
      StepResult* step_result = result.mutable_step_result();
      step_result->set_received_unix_ns(static_cast<uint64_t>(inbound->received_unix_ns));
      step_result->set_started_unix_ns(static_cast<uint64_t>(absl::GetCurrentTimeNanos()));
      RunStep(inbound->message.step(), step_result);
      step_result->set_finished_unix_ns(static_cast<uint64_t>(absl::GetCurrentTimeNanos()));
      if (!Write(result)) return;
      continue;
    }
    if (std::optional<std::pair<uint64_t, absl::string_view>> posted = link_->NewStep(link_step)) {
      link_step = posted->first;
      if (!RunLinkStep(posted->first, posted->second)) return;
      // The next step usually follows within the coordinator's turnaround: watch for it a
      // while rather than sleep and pay the wake-up, when a core is to spare for that.
      const uint32_t after = link_->Bell();
      const absl::Time until = absl::Now() + kPollForNextStep;
      while (poll_for_steps_ && link_->Bell() == after && absl::Now() < until) {
        for (int i = 0; i < 64; ++i) _mm_pause();
      }
      continue;
    }
    link_->Wait(bell, absl::InfiniteFuture());
  }
}

bool WorkerSession::RunLinkStep(uint64_t id, absl::string_view bytes) {
  const uint64_t received = static_cast<uint64_t>(absl::GetCurrentTimeNanos());
  if (!link_step_.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) ||
      link_step_.step_id() != id) {
    Fail(absl::StrCat("rank ", rank_, ": step ", id, " on the link is not a Step of that id"));
    return false;
  }
  link_result_.Clear();
  link_result_.set_received_unix_ns(received);
  link_result_.set_started_unix_ns(received);
  RunStep(link_step_, &link_result_);
  link_result_.set_finished_unix_ns(static_cast<uint64_t>(absl::GetCurrentTimeNanos()));
  link_result_.SerializeToString(&link_bytes_);
  if (absl::Status posted = link_->PostResult(id, link_bytes_); !posted.ok()) {
    Fail(absl::StrCat("rank ", rank_, ": ", posted.message()));
    return false;
  }
  return true;
}

absl::Status WorkerSession::AwaitMasks(const Step& step, absl::Time deadline) {
  const uint64_t id = step.step_id();
  auto take_from_inbox = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = inbox_.begin(); it != inbox_.end();) {
      if (!it->message.has_step_masks() || it->message.step_masks().step_id() > id) {
        ++it;
        continue;
      }
      const bool mine = it->message.step_masks().step_id() == id;
      if (mine) step_masks_ = std::move(*it->message.mutable_step_masks());
      it = inbox_.erase(it);  // mine, or of an earlier step that failed before taking its own
      if (mine) return true;
    }
    return false;
  };
  while (true) {
    const uint32_t bell = link_ != nullptr ? link_->Bell() : 0;
    if (link_ != nullptr) {
      if (std::optional<absl::string_view> bytes = link_->Masks(id)) {
        if (!step_masks_.ParseFromArray(bytes->data(), static_cast<int>(bytes->size()))) {
          return absl::InvalidArgumentError(
              absl::StrCat("the StepMasks of step ", id, " on the link does not parse"));
        }
        return absl::OkStatus();
      }
    }
    {
      absl::MutexLock lock(&mu_);
      if (take_from_inbox()) return absl::OkStatus();
      if (link_ == nullptr) {
        auto news = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return closed_ || std::any_of(inbox_.begin(), inbox_.end(), [](const Inbound& in) {
                   return in.message.has_step_masks();
                 });
        };
        mu_.AwaitWithDeadline(absl::Condition(&news), deadline);
        if (take_from_inbox()) return absl::OkStatus();
      }
      if (closed_) return absl::CancelledError("the session ended before the step's masks came");
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the StepMasks of step ", id, " did not come within the step's deadline"));
    }
    if (link_ != nullptr) link_->Wait(bell, deadline);
  }
}

void WorkerSession::RunStep(const Step& step, StepResult* out) {
  const absl::Time start = absl::Now();
  last_step_id_ = std::max(last_step_id_, step.step_id());
  const int64_t comm_before = comm_->comm_ns();
  StepResult& result = *out;
  result.set_step_id(step.step_id());
  const int64_t vocab = model_->config().vocab_size;
  // Every rank decodes and checks the same Step the same way, so a bad one is refused by
  // all before any collective, and no rank waits for a peer that refused it.
  absl::StatusOr<protocol::DecodedStep> decoded =
      protocol::DecodeStep(step, static_cast<int32_t>(vocab));
  absl::Status status = decoded.status();
  if (status.ok()) status = model_->Forward(decoded->batch, &logits_);
  // Rank 0 only samples from here on: wake the coordinator now, so that it is running (not
  // still waking up) when the result lands.
  if (link_ != nullptr && rank_ == 0) link_->Nudge();
  if (status.ok() && rank_ == 0 && step.masks_follow()) {
    const absl::Duration budget =
        step.deadline_ms() > 0 ? absl::Milliseconds(step.deadline_ms()) : kMasksWait;
    status = AwaitMasks(step, start + budget);
    if (status.ok()) {
      status = protocol::ApplyStepMasks(step_masks_, step.step_id(), static_cast<int32_t>(vocab),
                                        &*decoded);
    }
  }
  if (status.ok() && rank_ == 0) {
    status = protocol::SampleDecodedStep(*decoded, logits_, static_cast<int32_t>(vocab), &sampler_,
                                         &result);
  }
  if (!status.ok()) {
    result.clear_tokens();
    result.set_error(absl::StrCat("rank ", rank_, ": ", status.ToString()));
  }
  const int64_t comm_ns = comm_->comm_ns() - comm_before;
  const int64_t wall_ns = absl::ToInt64Nanoseconds(absl::Now() - start);
  result.set_comm_ns(static_cast<uint64_t>(comm_ns));
  result.set_compute_ns(static_cast<uint64_t>(std::max<int64_t>(0, wall_ns - comm_ns)));
  if (metrics_.has_value()) metrics_->step_duration.Observe(static_cast<double>(wall_ns) * 1e-9);
  steps_done_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace tpserve::worker
