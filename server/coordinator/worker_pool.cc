#include "server/coordinator/worker_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "server/common/catch_all.h"
#include "server/protocol/session_codec.h"
#include "server/protocol/step_codec.h"

namespace tpserve::coordinator {

using tpserve::v1::CoordinatorMessage;
using tpserve::v1::StoreReply;
using tpserve::v1::StoreRequest;
using tpserve::v1::WorkerMessage;

namespace {

// Waiting for a step's results on the link, RunStep sleeps on its bell and, once woken (by a
// rank's result, or rank 0's heads-up before it samples), polls for at most kPollAfterWake
// before sleeping again: the last result is then near, and a thread woken from a sleep of
// milliseconds takes 50-100 µs to run again on a virtual machine (measured on a 2-vCPU VM:
// 113 µs to notice a result after 20 ms asleep, 5 µs when polling).
constexpr absl::Duration kPollAfterWake = absl::Milliseconds(2);

// How often the watchdog looks for silent ranks.
constexpr absl::Duration kWatchPeriod = absl::Milliseconds(100);
// Extra silence allowed before a rank's first message of a world: the time for its server to
// take the Session call. A worker heartbeats from the moment it has read the Init, even while
// its previous Session is still closing (and abandoning its load), so this need not cover
// that; it did (10 s), and a rank stopped as a world was being built was named after 11.6 s.
constexpr absl::Duration kFirstWordGrace = absl::Seconds(1);

// The elastic world: how often the prober looks at the left-out workers, and how long one must
// answer before the world grows back to it, doubling each time it was left out, up to kMaxHold.
constexpr absl::Duration kProbePeriod = absl::Milliseconds(250);
constexpr absl::Duration kFirstHold = absl::Seconds(1);
constexpr absl::Duration kMaxHold = absl::Seconds(64);

absl::Duration Hold(int times_left_out) {
  absl::Duration hold = kFirstHold;
  for (int i = 1; i < times_left_out && hold < kMaxHold; ++i) hold *= 2;
  return std::min(hold, kMaxHold);
}

// Workers heartbeat this often: several beats fit in the hang timeout, within the bounds
// workers accept.
absl::Duration HeartbeatInterval(absl::Duration hang_timeout) {
  if (hang_timeout <= absl::ZeroDuration()) return absl::ZeroDuration();
  return std::clamp(hang_timeout / 8, absl::Milliseconds(10), absl::Seconds(1));
}

// The silence after which a rank is hung: a rank that stops just after a heartbeat is then
// named within hang_timeout of stopping (its last beat came up to one interval before, and
// the watchdog looks every kWatchPeriod), still after several missed beats.
absl::Duration SilenceBound(absl::Duration hang_timeout) {
  const absl::Duration interval = HeartbeatInterval(hang_timeout);
  return std::max(hang_timeout - interval - kWatchPeriod, 2 * interval);
}

std::string HostOf(const std::string& address) {
  if (!address.empty() && address.front() == '[') {  // [v6]:port
    return address.substr(1, address.find(']') - 1);
  }
  return address.substr(0, address.rfind(':'));
}

// The shared-memory step link for a world of `world_size`, or null (steps then go over the
// streams) when it cannot be made.
std::unique_ptr<comm::ShmStepLink> OpenStepLink(int world_size) {
  absl::StatusOr<std::unique_ptr<comm::ShmStepLink>> link = comm::ShmStepLink::Create(world_size);
  if (!link.ok()) {
    LOG(WARNING) << "steps over the streams: no shared-memory step link: " << link.status();
    return nullptr;
  }
  return *std::move(link);
}

// The Init that opens `rank`'s session in world `generation`; `step_link` names the
// shared-memory link (empty: none).
CoordinatorMessage InitMessage(const WorkerPoolOptions& options, const std::string& address,
                               int rank, int world_size, uint64_t generation, uint64_t epoch,
                               const std::string& step_link) {
  protocol::WorldAssignment world;
  world.model_path = options.model_path;
  world.rank = rank;
  world.world_size = world_size;
  world.backend = options.backend;
  world.kv_budget_bytes = options.kv_budget_bytes;
  world.kv_block_size = options.kv_block_size;
  world.world_generation = generation;
  world.comm_host = HostOf(address);
  world.comm_timeout = options.comm_timeout;
  world.threads = options.threads;
  world.dequantize = options.dequantize;
  world.float_row_sums = options.float_row_sums;
  world.step_link = step_link;
  world.coordinator_epoch = epoch;
  world.heartbeat_interval = HeartbeatInterval(options.hang_timeout);
  CoordinatorMessage message;
  *message.mutable_init() = protocol::EncodeInit(world);
  return message;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseWorkerList(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    const std::string address(absl::StripAsciiWhitespace(part));
    const size_t colon = address.rfind(':');
    int port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--workers: '", address, "' is not HOST:PORT"));
    }
    out.push_back(address);
  }
  if (out.empty()) return absl::InvalidArgumentError("--workers: the list is empty");
  return out;
}

absl::Status CheckMinWorldSize(int min_world_size, int workers) {
  if (min_world_size == -1) return absl::OkStatus();
  if (min_world_size < 1 || min_world_size > workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min_world_size: ", min_world_size, " is not in [1, ", workers,
                     "] (the workers listed); leave it out for the full world"));
  }
  return absl::OkStatus();
}

// One worker's Session. `ready` and `result` are guarded by WorkerPool::mu_; `write_mu`
// serialises writes; the stream is read only by `reader`.
struct WorkerPool::Session {
  int rank = 0;    // in this world
  int worker = 0;  // in the configured list
  std::string address;
  std::unique_ptr<tpserve::v1::Worker::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<CoordinatorMessage, WorkerMessage>> stream;
  absl::Mutex write_mu;
  std::thread reader;
  std::optional<tpserve::v1::Ready> ready;
  std::optional<tpserve::v1::StepResult> result;
  int64_t sent_unix_ns = 0;      // the current Step's write began
  int64_t returned_unix_ns = 0;  // its result arrived
};

WorkerPool::WorkerPool(WorkerPoolOptions options)
    : options_(std::move(options)),
      epoch_(options_.coordinator_epoch != 0 ? options_.coordinator_epoch
                                             : static_cast<uint64_t>(absl::GetCurrentTimeNanos())) {
  {
    absl::MutexLock lock(&mu_);
    standing_.resize(options_.workers.size());
  }
  if (options_.hang_timeout > absl::ZeroDuration()) watchdog_ = std::thread([this] { Watch(); });
  if (elastic()) prober_ = std::thread([this] { Probe(); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_watch_ = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
  if (prober_.joinable()) prober_.join();
  Shutdown("pool destroyed");
}

int WorkerPool::down_rank() const {
  absl::MutexLock lock(&mu_);
  return down_rank_;
}

void WorkerPool::Watch() {
  while (true) {
    int hung = -1;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_watch_), kWatchPeriod)) return;
      hung = FindHungLocked();
    }
    if (hung >= 0 && options_.on_hung) options_.on_hung(hung);
  }
}

int WorkerPool::FindHungLocked() {
  if (state_ != State::kStarting && state_ != State::kUp) return -1;
  const absl::Time now = absl::Now();
  for (int rank = 0; rank < static_cast<int>(last_heard_.size()); ++rank) {
    const absl::Duration silent = now - last_heard_[rank];
    const absl::Duration bound = SilenceBound(options_.hang_timeout) +
                                 (heard_[rank] ? absl::ZeroDuration() : kFirstWordGrace);
    if (silent <= bound) continue;
    MarkDownLocked(rank, absl::StatusCode::kUnavailable,
                   absl::StrCat("silent for ",
                                absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(1))),
                                " (heartbeats every ",
                                absl::FormatDuration(HeartbeatInterval(options_.hang_timeout)),
                                "): hung or stopped"));
    return rank;
  }
  return -1;
}

int WorkerPool::world_size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(members_.size());
}

std::vector<int> WorkerPool::world_members() const {
  absl::MutexLock lock(&mu_);
  return members_;
}

std::vector<bool> WorkerPool::ProbeWorkers(const std::vector<int>& which) const {
  std::vector<bool> answers(which.size(), false);
  std::vector<std::thread> dials;
  dials.reserve(which.size());
  for (size_t i = 0; i < which.size(); ++i) {
    dials.emplace_back([this, &answers, i, worker = which[i]] {
      const std::shared_ptr<grpc::Channel> channel =
          grpc::CreateChannel(options_.workers[worker], options_.credentials != nullptr
                                                            ? options_.credentials
                                                            : grpc::InsecureChannelCredentials());
      answers[i] =
          channel->WaitForConnected(absl::ToChronoTime(absl::Now() + options_.probe_timeout));
    });
  }
  for (std::thread& t : dials) t.join();
  return answers;
}

absl::StatusOr<std::vector<int>> WorkerPool::ChooseMembers() {
  const int n = configured_workers();
  std::vector<int> all(n);
  for (int w = 0; w < n; ++w) all[w] = w;
  if (!elastic()) return all;
  const std::vector<bool> answers = ProbeWorkers(all);
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  std::vector<int> members;
  std::string waiting, lost;
  for (int w = 0; w < n; ++w) {
    Standing& st = standing_[w];
    const std::string name = absl::StrCat("worker ", w, " (", options_.workers[w], ")");
    if (st.left_out) {
      if (!answers[w]) {
        st.answering_since = absl::InfiniteFuture();
      } else if (st.answering_since == absl::InfiniteFuture()) {
        st.answering_since = now;
      }
      if (now - st.answering_since >= Hold(st.times_left_out)) {
        LOG(INFO) << name << " has answered for " << absl::FormatDuration(Hold(st.times_left_out))
                  << ": it rejoins the world";
        st.left_out = false;
        st.lost_since = absl::InfiniteFuture();
      } else {
        absl::StrAppend(&lost, lost.empty() ? "" : ", ", name);
        continue;
      }
    }
    if (!answers[w] && st.lost_since == absl::InfiniteFuture()) st.lost_since = now;
    if (st.lost_since != absl::InfiniteFuture() && now - st.lost_since >= options_.rejoin_timeout) {
      st.left_out = true;
      ++st.times_left_out;
      st.answering_since = absl::InfiniteFuture();
      LOG(WARNING) << name << " lost: not back in a world within the rejoin timeout of "
                   << absl::FormatDuration(options_.rejoin_timeout)
                   << "; the world goes on without it (left out " << st.times_left_out
                   << " times; it may rejoin after answering for "
                   << absl::FormatDuration(Hold(st.times_left_out)) << ")";
      absl::StrAppend(&lost, lost.empty() ? "" : ", ", name);
      continue;
    }
    if (!answers[w]) {
      absl::StrAppend(&waiting, waiting.empty() ? "" : ", ", name, " (",
                      absl::FormatDuration(absl::Trunc(now - st.lost_since, absl::Milliseconds(1))),
                      " of ", absl::FormatDuration(options_.rejoin_timeout), ")");
      continue;
    }
    members.push_back(w);
  }
  if (!waiting.empty()) {
    return absl::UnavailableError(absl::StrCat("waiting for lost workers to rejoin: ", waiting));
  }
  if (static_cast<int>(members.size()) < options_.min_world_size) {
    return absl::UnavailableError(absl::StrCat("only ", members.size(), " of ", n,
                                               " workers can serve (lost: ", lost,
                                               "); --min_world_size is ", options_.min_world_size));
  }
  std::string skipped;
  for (int size = static_cast<int>(members.size()); size >= options_.min_world_size; --size) {
    const absl::Status split =
        options_.can_split != nullptr ? options_.can_split(size) : absl::OkStatus();
    if (split.ok()) {
      members.resize(size);
      if (!lost.empty()) {
        LOG(WARNING) << "building a world of " << size << " of " << n << " workers; lost: " << lost;
      }
      return members;
    }
    LOG(WARNING) << "a world of " << size << " workers is skipped: " << split.message();
    absl::StrAppend(&skipped, skipped.empty() ? "" : "; ", size, ": ", split.message());
  }
  return absl::UnavailableError(absl::StrCat("no world of ", options_.min_world_size, " to ",
                                             members.size(), " workers can split the model (",
                                             skipped, "); waiting for more workers"));
}

void WorkerPool::Probe() {
  while (true) {
    std::vector<int> left_out;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_watch_), kProbePeriod)) return;
      if (state_ != State::kUp) continue;
      for (int w = 0; w < static_cast<int>(standing_.size()); ++w) {
        if (standing_[w].left_out) left_out.push_back(w);
      }
    }
    if (left_out.empty()) continue;
    const std::vector<bool> answers = ProbeWorkers(left_out);
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < left_out.size(); ++i) {
      Standing& st = standing_[left_out[i]];
      if (!answers[i]) {
        st.answering_since = absl::InfiniteFuture();
        continue;
      }
      if (st.answering_since == absl::InfiniteFuture()) st.answering_since = now;
      if (now - st.answering_since >= Hold(st.times_left_out) && state_ == State::kUp) {
        MarkDownLocked(
            -1, absl::StatusCode::kUnavailable,
            absl::StrCat("worker ", left_out[i], " (", options_.workers[left_out[i]],
                         ") has answered for ", absl::FormatDuration(Hold(st.times_left_out)),
                         ": growing the world back"));
      }
    }
  }
}

int64_t WorkerPool::kv_blocks() const {
  absl::MutexLock lock(&mu_);
  return kv_blocks_;
}

int32_t WorkerPool::vocab_size() const {
  absl::MutexLock lock(&mu_);
  return vocab_size_;
}

uint64_t WorkerPool::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

std::string WorkerPool::comm_backend() const {
  absl::MutexLock lock(&mu_);
  return comm_backend_;
}

absl::Status WorkerPool::status() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kUp ? absl::OkStatus() : down_;
}

bool WorkerPool::Write(Session* s, const CoordinatorMessage& message) {
  absl::MutexLock lock(&s->write_mu);
  return s->stream->Write(message);
}

void WorkerPool::MarkDown(int rank, absl::StatusCode code, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  MarkDownLocked(rank, code, reason);
}

void WorkerPool::MarkDownLocked(int rank, absl::StatusCode code, const std::string& reason) {
  if (state_ != State::kStarting && state_ != State::kUp) return;  // first reason wins
  state_ = State::kDown;
  const bool named = rank >= 0 && rank < static_cast<int>(members_.size());
  down_rank_ = named ? members_[rank] : -1;
  if (named && standing_[down_rank_].lost_since == absl::InfiniteFuture()) {
    standing_[down_rank_].lost_since = absl::Now();
  }
  down_ = named ? absl::Status(
                      code, absl::StrCat("world generation ", generation_, " is down: worker rank ",
                                         rank, " (", options_.workers[down_rank_], "): ", reason))
                : absl::Status(
                      code, absl::StrCat("world generation ", generation_, " is down: ", reason));
  LOG(WARNING) << down_;
  // Cancel every Session: the workers abort their communicators and become free again.
  for (const auto& s : sessions_) s->context.TryCancel();
  if (link_ != nullptr) link_->Ring();  // RunStep may wait on the link
}

absl::Status WorkerPool::Start() {
  Teardown();
  if (options_.workers.empty()) return absl::InvalidArgumentError("WorkerPool: no workers");
  absl::StatusOr<std::vector<int>> members = ChooseMembers();
  if (!members.ok()) {
    absl::MutexLock lock(&mu_);
    state_ = State::kDown;
    down_ = members.status();
    return down_;
  }
  const int world = static_cast<int>(members->size());
  uint64_t generation = 0;
  rendezvous_.Open();
  // The sessions exist before the world is starting: from then on the watchdog may mark it down.
  for (int r = 0; r < world; ++r) {
    auto s = std::make_unique<Session>();
    s->rank = r;
    s->worker = (*members)[r];
    s->address = options_.workers[s->worker];
    s->stub = tpserve::v1::Worker::NewStub(grpc::CreateChannel(
        s->address, options_.credentials != nullptr ? options_.credentials
                                                    : grpc::InsecureChannelCredentials()));
    sessions_.push_back(std::move(s));
  }
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kStarting;
    members_ = *members;
    generation = ++generation_;
    kv_blocks_ = 0;
    vocab_size_ = 0;
    down_rank_ = -1;
    last_heard_.assign(sessions_.size(), absl::Now());
    heard_.assign(sessions_.size(), false);
  }
  if (options_.step_link) link_ = OpenStepLink(world);
  for (const auto& s : sessions_) {
    s->stream = s->stub->Session(&s->context);
    {
      absl::MutexLock lock(&mu_);
      ++readers_alive_;
    }
    s->reader = std::thread([this, session = s.get()] { ReadLoop(session); });
    const CoordinatorMessage message = InitMessage(options_, s->address, s->rank, world, generation,
                                                   epoch_, link_ != nullptr ? link_->name() : "");
    if (!Write(s.get(), message)) {
      MarkDown(s->rank, absl::StatusCode::kUnavailable, "cannot send Init (unreachable?)");
    }
  }
  absl::MutexLock lock(&mu_);
  auto all_ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (state_ != State::kStarting) return true;
    for (const auto& s : sessions_) {
      if (!s->ready.has_value()) return false;
    }
    return true;
  };
  const bool ready = mu_.AwaitWithTimeout(absl::Condition(&all_ready), options_.ready_timeout);
  if (link_ != nullptr) link_->Unlink();  // mapped by those that could, or never will be
  if (!ready) {
    for (const auto& s : sessions_) {
      if (!s->ready.has_value()) {
        MarkDownLocked(
            s->rank, absl::StatusCode::kDeadlineExceeded,
            absl::StrCat("no Ready within ", absl::FormatDuration(options_.ready_timeout)));
        break;
      }
    }
  }
  if (state_ != State::kStarting) return down_;
  return AdoptReadiesLocked();
}

absl::Status WorkerPool::AdoptReadiesLocked() {
  std::vector<protocol::WorkerHoldings> holdings;
  for (const auto& s : sessions_) {
    absl::StatusOr<protocol::WorkerHoldings> held = protocol::DecodeReady(
        *s->ready, options_.vocab_size,
        protocol::MaxKvBlocks(options_.kv_budget_bytes, options_.kv_block_size));
    if (!held.ok()) {
      MarkDownLocked(s->rank, absl::StatusCode::kFailedPrecondition,
                     std::string{held.status().message()});
      return down_;
    }
    holdings.push_back(*std::move(held));
  }
  // The ranks' collectives must match: a world whose ranks sum the row-parallel projections
  // differently (one in exact mode, one unable to hold packed weights) would mismatch them.
  for (size_t r = 1; r < holdings.size(); ++r) {
    if (holdings[r].exact_row_sums != holdings.front().exact_row_sums) {
      auto how = [](bool exact) { return exact ? "exactly" : "in float"; };
      MarkDownLocked(
          sessions_[r]->rank, absl::StatusCode::kFailedPrecondition,
          absl::StrCat("Ready: rank ", sessions_[r]->rank, " sums its row-parallel projections ",
                       how(holdings[r].exact_row_sums), ", rank ", sessions_.front()->rank, " ",
                       how(holdings.front().exact_row_sums),
                       " (workers differ in --dequantize or in what they can hold)"));
      return down_;
    }
  }
  kv_blocks_ = holdings.front().kv_blocks;
  use_link_ = link_ != nullptr;
  for (const protocol::WorkerHoldings& held : holdings) {
    kv_blocks_ = std::min(kv_blocks_, held.kv_blocks);
    use_link_ = use_link_ && held.step_link;
  }
  vocab_size_ = holdings.front().vocab_size;
  comm_backend_ = holdings.front().comm_backend;
  state_ = State::kUp;
  std::string workers;
  for (int w : members_) {
    standing_[w].lost_since = absl::InfiniteFuture();
    absl::StrAppend(&workers, workers.empty() ? "" : ",", w);
  }
  LOG(INFO) << "world generation " << generation_ << " up: " << members_.size() << " of "
            << configured_workers() << " workers (" << workers << ") over " << comm_backend_ << ", "
            << kv_blocks_ << " KV blocks, steps over "
            << (use_link_ ? "the shared-memory link" : "the streams") << ", row-parallel sums "
            << (holdings.front().exact_row_sums ? "exact (the same logits at every world size)"
                                                : "in float");
  return absl::OkStatus();
}

void WorkerPool::ReadLoop(Session* s) {
  // A worker's message that throws in its handling marks that worker down, as a broken
  // stream would: the world is rebuilt, the process lives.
  const absl::Status read =
      CatchAll(absl::StrCat("rank ", s->rank, "'s stream"), [this, s] { ReadMessages(s); });
  absl::MutexLock lock(&mu_);
  MarkDownLocked(s->rank, read.ok() ? absl::StatusCode::kUnavailable : read.code(),
                 read.ok() ? "the Session stream broke" : absl::StrCat(read.message()));
  --readers_alive_;
}

void WorkerPool::ReadMessages(Session* s) {
  WorkerMessage message;
  while (s->stream->Read(&message)) {
    {
      absl::MutexLock lock(&mu_);
      last_heard_[s->rank] = absl::Now();
      heard_[s->rank] = true;
    }
    switch (message.kind_case()) {
      case WorkerMessage::kHeartbeat:  // only its arrival matters
        break;
      case WorkerMessage::kStoreRequest:
        ServeStoreRequest(s, message.store_request());
        break;
      case WorkerMessage::kReady: {
        absl::MutexLock lock(&mu_);
        s->ready = message.ready();
        break;
      }
      case WorkerMessage::kStepResult: {
        absl::MutexLock lock(&mu_);
        const tpserve::v1::StepResult& result = message.step_result();
        if (result.step_id() == current_step_) {
          s->result = result;
          s->returned_unix_ns = absl::GetCurrentTimeNanos();
          if (link_ != nullptr) link_->Ring();  // RunStep may wait on the link
        }
        if (!result.error().empty()) {
          MarkDownLocked(s->rank, absl::StatusCode::kInternal,
                         absl::StrCat("step ", result.step_id(), " failed: ", result.error()));
        }
        break;
      }
      case WorkerMessage::kError:
        MarkDown(s->rank, absl::StatusCode::kFailedPrecondition, message.error());
        break;
      default:
        MarkDown(s->rank, absl::StatusCode::kInternal,
                 absl::StrCat("unexpected message kind ", message.kind_case()));
        break;
    }
  }
}

void WorkerPool::ServeStoreRequest(Session* s, const StoreRequest& request) {
  rendezvous_.Serve(request, [this, s](StoreReply reply) {
    CoordinatorMessage message;
    *message.mutable_store_reply() = std::move(reply);
    Write(s, message);
  });
}

absl::StatusOr<StepOutcome> WorkerPool::RunStep(const tpserve::v1::Step& step,
                                                const StepMaskFill& masks) {
  if (step.masks_follow() && masks == nullptr) {
    return absl::InvalidArgumentError("Step: masks_follow without masks");
  }
  absl::MutexLock step_lock(&step_mu_);
  const absl::Time start = absl::Now();
  const absl::Duration budget =
      step.deadline_ms() > 0 ? absl::Milliseconds(step.deadline_ms()) : options_.step_deadline;
  const absl::Time deadline = start + budget;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kUp) {
      return absl::UnavailableError(down_.message());
    }
    current_step_ = step.step_id();
    for (const auto& s : sessions_) s->result.reset();
  }
  bool posted = false;
  if (use_link_) {
    step.SerializeToString(&step_bytes_);
    const int64_t now = absl::GetCurrentTimeNanos();
    for (const auto& s : sessions_) s->sent_unix_ns = now;
    posted = link_->PostStep(step.step_id(), step_bytes_);
  }
  if (!posted) {  // the streams: no link, or a Step too large for it
    step_message_.Clear();
    *step_message_.mutable_step() = step;
    step_message_.mutable_step()->set_deadline_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(budget)));
    for (const auto& s : sessions_) {
      s->sent_unix_ns = absl::GetCurrentTimeNanos();
      if (!Write(s.get(), step_message_)) {
        MarkDown(s->rank, absl::StatusCode::kUnavailable, "cannot send the Step: the stream broke");
        break;
      }
    }
  }
  if (step.masks_follow()) SendMasks(step.step_id(), posted, masks);
  absl::Status joined = use_link_ ? AwaitResultsOnLink(step.step_id(), deadline, budget)
                                  : AwaitResultsOnStreams(step.step_id(), deadline, budget);
  if (!joined.ok()) return joined;
  absl::MutexLock lock(&mu_);
  for (const auto& s : sessions_) {
    if (absl::Status valid = protocol::CheckStepResult(step, *s->result, s->rank, vocab_size_);
        !valid.ok()) {
      MarkDownLocked(s->rank, absl::StatusCode::kInternal,
                     absl::StrCat("step ", step.step_id(), " refused: ", valid.message()));
      return down_;
    }
  }
  StepOutcome outcome;
  outcome.result = *sessions_.front()->result;
  for (const auto& s : sessions_) {
    const tpserve::v1::StepResult& r = *s->result;
    outcome.compute_ns.push_back(r.compute_ns());
    outcome.comm_ns.push_back(r.comm_ns());
    outcome.times.push_back({s->sent_unix_ns, static_cast<int64_t>(r.received_unix_ns()),
                             static_cast<int64_t>(r.started_unix_ns()),
                             static_cast<int64_t>(r.finished_unix_ns()), s->returned_unix_ns});
  }
  outcome.wall = absl::Now() - start;
  return outcome;
}

void WorkerPool::SendMasks(uint64_t step_id, bool on_link, const StepMaskFill& masks) {
  tpserve::v1::StepMasks* step_masks = masks_message_.mutable_step_masks();
  step_masks->Clear();
  masks(step_masks);  // while the ranks run the forward pass
  step_masks->set_step_id(step_id);
  if (on_link) {
    step_masks->SerializeToString(&masks_bytes_);
    if (static_cast<int64_t>(masks_bytes_.size()) <= options_.link_masks_bytes &&
        link_->PostMasks(step_id, masks_bytes_)) {
      return;
    }
  }
  Session* rank0 = sessions_.front().get();
  if (!Write(rank0, masks_message_)) {
    MarkDown(rank0->rank, absl::StatusCode::kUnavailable,
             "cannot send the StepMasks: the stream broke");
  }
}

void WorkerPool::MissedDeadlineLocked(uint64_t step_id, absl::Duration deadline) {
  for (const auto& s : sessions_) {
    if (!s->result.has_value()) {
      MarkDownLocked(s->rank, absl::StatusCode::kDeadlineExceeded,
                     absl::StrCat("step ", step_id, " missed its deadline of ",
                                  absl::FormatDuration(deadline)));
      return;
    }
  }
}

absl::Status WorkerPool::AwaitResultsOnStreams(uint64_t step_id, absl::Time deadline,
                                               absl::Duration budget) {
  absl::MutexLock lock(&mu_);
  auto joined = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (state_ != State::kUp) return true;
    for (const auto& s : sessions_) {
      if (!s->result.has_value()) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&joined), deadline)) {
    MissedDeadlineLocked(step_id, budget);
  }
  return state_ == State::kUp ? absl::OkStatus() : down_;
}

absl::Status WorkerPool::AwaitResultsOnLink(uint64_t step_id, absl::Time deadline,
                                            absl::Duration budget) {
  absl::Time poll_until = absl::InfinitePast();
  while (true) {
    const uint32_t bell = link_->Bell();  // before looking: news after this rings it again
    {
      absl::MutexLock lock(&mu_);
      if (state_ != State::kUp) return down_;
      bool joined = true;
      for (const auto& s : sessions_) {
        if (s->result.has_value()) continue;  // came on its stream
        std::optional<absl::string_view> bytes = link_->Result(s->rank, step_id);
        if (!bytes.has_value()) {
          joined = false;
          continue;
        }
        tpserve::v1::StepResult result;
        if (!result.ParseFromArray(bytes->data(), static_cast<int>(bytes->size())) ||
            result.step_id() != step_id) {
          MarkDownLocked(s->rank, absl::StatusCode::kInternal,
                         absl::StrCat("its result of step ", step_id,
                                      " on the link does not "
                                      "parse as a StepResult of that step"));
          return down_;
        }
        if (!result.error().empty()) {
          MarkDownLocked(s->rank, absl::StatusCode::kInternal,
                         absl::StrCat("step ", step_id, " failed: ", result.error()));
          return down_;
        }
        s->result = std::move(result);
        s->returned_unix_ns = absl::GetCurrentTimeNanos();
        last_heard_[s->rank] = absl::Now();
      }
      if (joined) return absl::OkStatus();
      if (absl::Now() >= deadline) {
        MissedDeadlineLocked(step_id, budget);
        return down_;
      }
    }
    if (absl::Now() < poll_until) {
      for (int i = 0; i < 64; ++i) _mm_pause();
      continue;
    }
    link_->Wait(bell, deadline);
    poll_until = absl::Now() + kPollAfterWake;
  }
}

void WorkerPool::Shutdown(const std::string& reason) {
  bool was_up = false;
  {
    absl::MutexLock lock(&mu_);
    was_up = state_ == State::kUp;
  }
  if (was_up) {
    CoordinatorMessage message;
    message.mutable_shutdown()->set_reason(reason);
    for (const auto& s : sessions_) {
      Write(s.get(), message);
      absl::MutexLock lock(&s->write_mu);
      s->stream->WritesDone();
    }
    absl::MutexLock lock(&mu_);
    state_ = State::kIdle;
    down_ = absl::UnavailableError(absl::StrCat("the world was shut down: ", reason));
    auto closed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return readers_alive_ == 0; };
    mu_.AwaitWithTimeout(absl::Condition(&closed), options_.shutdown_grace);
  }
  Teardown();
}

void WorkerPool::Teardown() {
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kStarting || state_ == State::kUp) state_ = State::kIdle;
    generation = generation_;
  }
  for (const auto& s : sessions_) s->context.TryCancel();
  for (const auto& s : sessions_) {
    if (s->reader.joinable()) s->reader.join();
  }
  // Its blocking operations answer on the sessions: closed before they go.
  rendezvous_.Close(generation > 0 ? absl::StrCat("gen", generation, "/") : "");
  for (const auto& s : sessions_) {
    if (s->stream != nullptr) s->stream->Finish();
  }
  sessions_.clear();
  use_link_ = false;
  link_.reset();
}

}  // namespace tpserve::coordinator
