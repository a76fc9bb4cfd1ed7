#include "server/comm/shm/shm_communicator.h"

#include <immintrin.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "kernels/cpu/add.h"
#include "server/comm/shm/futex.h"
#include "server/comm/shm/shm_segment.h"
#include "server/common/status_macros.h"

namespace tpserve::comm {
namespace {

using shm::ShmSegment;

constexpr uint64_t kMagic = 0x31766d68732d7074;  // "tp-shmv1"
constexpr int kMaxWorld = 64;

// Lives at the start of the segment.
struct alignas(64) SegmentHeader {
  uint64_t magic;
  uint64_t world_size;
  uint64_t slot_bytes;
  std::atomic<uint32_t> broken;       // 0, or 1 + the first rank whose collective failed
  std::atomic<uint32_t> broken_code;  // that failure's absl::StatusCode
};

// One per rank, each on its own cache line: written by its rank, read by the others.
struct alignas(64) RankState {
  std::atomic<uint32_t> posted;    // futex word: the last collective this rank has posted
  std::atomic<uint32_t> sleepers;  // threads (of any rank) asleep on `posted`
  std::atomic<int32_t> pid;
  std::atomic<uint64_t> pid_namespace;
};

// Segment: header | RankState[world] | page-aligned slots [world][2][slot_bytes].
struct Layout {
  int64_t ranks_offset = 0;
  int64_t slots_offset = 0;
  int64_t bytes = 0;
};

Layout LayoutFor(int world, int64_t slot_bytes) {
  Layout l;
  l.ranks_offset = sizeof(SegmentHeader);
  const int64_t end = l.ranks_offset + world * static_cast<int64_t>(sizeof(RankState));
  l.slots_offset = (end + 4095) / 4096 * 4096;
  l.bytes = l.slots_offset + world * 2 * slot_bytes;
  return l;
}

// Whether a counter that has posted `posted` has reached collective `k` (wrap-around safe).
bool Reached(uint32_t posted, uint32_t k) { return static_cast<int32_t>(posted - k) >= 0; }

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(ShmSegment segment, int rank, int world, const ShmOptions& options)
      : segment_(std::move(segment)),
        rank_(rank),
        world_(world),
        options_(options),
        slot_floats_(options.slot_bytes / static_cast<int64_t>(sizeof(float))),
        my_pid_namespace_(shm::PidNamespace()) {
    const Layout layout = LayoutFor(world, options.slot_bytes);
    char* base = static_cast<char*>(segment_.data());
    header_ = reinterpret_cast<SegmentHeader*>(base);
    ranks_ = reinterpret_cast<RankState*>(base + layout.ranks_offset);
    slots_ = reinterpret_cast<float*>(base + layout.slots_offset);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string_view backend_name() const override { return "shm"; }

  // data: [count] f32, in place.
  absl::Status AllReduceSum(float* data, int64_t count) override {
    return Run("all_reduce_sum", count, [&](int64_t offset, int64_t n, uint32_t k) {
      std::memcpy(Slot(rank_, k), data + offset, n * sizeof(float));
      Post(k);
      RETURN_IF_ERROR(AwaitAll(k));
      const float* parts[kMaxWorld];
      for (int q = 0; q < world_; ++q) parts[q] = Slot(q, k);
      kernels::cpu::SumInOrder(parts, world_, data + offset, n);
      return absl::OkStatus();
    });
  }

  // data: [count] int64, in place: each rank's part through its slot, the parts added in rank
  // order (exact, and the same in any order), chunks of half a slot.
  absl::Status AllReduceSumInt64(int64_t* data, int64_t count) override {
    const int64_t per_chunk = slot_floats_ / 2;
    return Run(
        "all_reduce_sum_int64", count,
        [&](int64_t offset, int64_t n, uint32_t k) {
          std::memcpy(Slot(rank_, k), data + offset, n * sizeof(int64_t));
          Post(k);
          RETURN_IF_ERROR(AwaitAll(k));
          // Rank by rank over the chunk, so the adds vectorise; unsigned: wrapping is defined,
          // the same bits as int64's.
          int64_t* out = data + offset;
          std::memcpy(out, Slot(0, k), n * sizeof(int64_t));
          for (int q = 1; q < world_; ++q) {
            const char* part = reinterpret_cast<const char*>(Slot(q, k));
            for (int64_t i = 0; i < n; ++i) {
              uint64_t v;
              std::memcpy(&v, part + i * sizeof(int64_t), sizeof(v));
              out[i] = static_cast<int64_t>(static_cast<uint64_t>(out[i]) + v);
            }
          }
          return absl::OkStatus();
        },
        per_chunk);
  }

  // in: [count]; out: [world_size * count], rank-major.
  absl::Status AllGather(const float* in, int64_t count, float* out) override {
    return Run("all_gather", count, [&](int64_t offset, int64_t n, uint32_t k) {
      std::memcpy(Slot(rank_, k), in + offset, n * sizeof(float));
      Post(k);
      RETURN_IF_ERROR(AwaitAll(k));
      for (int q = 0; q < world_; ++q) {
        std::memcpy(out + q * count + offset, Slot(q, k), n * sizeof(float));
      }
      return absl::OkStatus();
    });
  }

  // As AllGather on rank 0; ranks > 0 post their part and return without waiting.
  absl::Status Gather(const float* in, int64_t count, float* out) override {
    return Run("gather", count, [&](int64_t offset, int64_t n, uint32_t k) {
      std::memcpy(Slot(rank_, k), in + offset, n * sizeof(float));
      Post(k);
      if (rank_ != 0) return absl::OkStatus();
      RETURN_IF_ERROR(AwaitAll(k));
      for (int q = 0; q < world_; ++q) {
        std::memcpy(out + q * count + offset, Slot(q, k), n * sizeof(float));
      }
      return absl::OkStatus();
    });
  }

  void Abort() override {
    aborted_.store(true);
    Break(absl::StatusCode::kAborted);
  }

 private:
  // Runs one collective of `count` floats per rank as chunks of at most one slot; `chunk`
  // (offset, n, k) moves floats [offset, offset + n) as collective number k.
  template <typename Chunk>
  absl::Status Run(const char* what, int64_t count, Chunk&& chunk, int64_t per_chunk = 0) {
    if (per_chunk == 0) per_chunk = slot_floats_;
    if (absl::Status broken = Refuse(); !broken.ok()) return Annotate(broken, what, count);
    if (count < 0) {
      return absl::InvalidArgumentError(absl::StrCat("shm ", what, ": negative count"));
    }
    for (int64_t offset = 0; offset < count; offset += per_chunk) {
      const int64_t n = std::min(per_chunk, count - offset);
      const uint32_t k = posted_ + 1;
      absl::Status status = Enter(k);
      if (status.ok()) status = chunk(offset, n, k);
      if (!status.ok()) {
        status = Annotate(status, what, count);
        if (failure_.ok()) failure_ = status;
        Break(status.code());
        return status;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Annotate(const absl::Status& status, const char* what, int64_t count) const {
    return absl::Status(status.code(), absl::StrCat("shm rank ", rank_, "/", world_, " ", what, "(",
                                                    count, " floats): ", status.message()));
  }

  // Why this rank may not start a collective: aborted, an earlier failure, a broken world.
  absl::Status Refuse() const {
    if (aborted_.load(std::memory_order_relaxed)) {
      return absl::AbortedError("communicator aborted");
    }
    if (!failure_.ok()) {
      return absl::Status(failure_.code(),
                          absl::StrCat("after an earlier failure: ", failure_.message()));
    }
    return Broken();
  }

  absl::Status Broken() const {
    if (aborted_.load(std::memory_order_relaxed)) {
      return absl::AbortedError("communicator aborted");
    }
    const uint32_t broken = header_->broken.load(std::memory_order_acquire);
    if (broken == 0) return absl::OkStatus();
    const auto code = static_cast<absl::StatusCode>(header_->broken_code.load());
    return absl::UnavailableError(absl::StrCat("the world is broken: rank ", broken - 1,
                                               " failed a collective (",
                                               absl::StatusCodeToString(code), ")"));
  }

  // Marks the world broken (first breaker wins) and wakes every sleeping rank.
  void Break(absl::StatusCode code) {
    uint32_t expected = 0;
    if (header_->broken.compare_exchange_strong(expected, static_cast<uint32_t>(rank_ + 1))) {
      header_->broken_code.store(static_cast<uint32_t>(code));
    }
    for (int q = 0; q < world_; ++q) shm::FutexWakeAll(&ranks_[q].posted);
  }

  float* Slot(int rank, uint32_t k) const {
    return slots_ + (static_cast<int64_t>(rank) * 2 + (k & 1)) * slot_floats_;
  }

  // Before writing the slot of collective k: every rank has posted k - 1, so it has finished
  // reading collective k - 2, which used the same slot.
  absl::Status Enter(uint32_t k) {
    if (Reached(all_posted_, k - 1)) return absl::OkStatus();
    return AwaitAll(k - 1);
  }

  void Post(uint32_t k) {
    RankState& me = ranks_[rank_];
    me.posted.store(k, std::memory_order_seq_cst);
    posted_ = k;
    if (me.sleepers.load(std::memory_order_seq_cst) != 0) shm::FutexWakeAll(&me.posted);
  }

  absl::Status AwaitAll(uint32_t k) {
    for (int q = 0; q < world_; ++q) {
      if (q != rank_) RETURN_IF_ERROR(AwaitRank(q, k));
    }
    all_posted_ = k;
    return absl::OkStatus();
  }

  // Waits until rank q has posted collective k: spin, then sleep on q's futex word.
  absl::Status AwaitRank(int q, uint32_t k) {
    RankState& peer = ranks_[q];
    if (Reached(peer.posted.load(std::memory_order_acquire), k)) return absl::OkStatus();
    if (options_.spin > absl::ZeroDuration()) {
      const absl::Time spin_end = absl::Now() + options_.spin;
      do {
        for (int i = 0; i < 64; ++i) {
          _mm_pause();
          if (Reached(peer.posted.load(std::memory_order_acquire), k)) return absl::OkStatus();
        }
        if (header_->broken.load(std::memory_order_relaxed) != 0) break;
      } while (absl::Now() < spin_end);
    }
    const absl::Time start = absl::Now();
    const absl::Time deadline = start + options_.timeout;
    absl::Time next_check = start + options_.liveness_check;
    while (true) {
      RETURN_IF_ERROR(Broken());
      peer.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = peer.posted.load(std::memory_order_seq_cst);
      if (!Reached(seen, k)) {
        shm::FutexWait(&peer.posted, seen, std::min(deadline, next_check) - absl::Now());
      }
      peer.sleepers.fetch_sub(1, std::memory_order_relaxed);
      if (Reached(peer.posted.load(std::memory_order_acquire), k)) return absl::OkStatus();
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("rank ", q, " did not arrive within ",
                                                        absl::FormatDuration(options_.timeout)));
      }
      if (now >= next_check) {
        RETURN_IF_ERROR(CheckAlive(q));
        next_check = now + options_.liveness_check;
      }
    }
  }

  // Unavailable when rank q's process is gone (judged only within one pid namespace).
  absl::Status CheckAlive(int q) const {
    const RankState& peer = ranks_[q];
    const pid_t pid = peer.pid.load();
    if (pid <= 0 || peer.pid_namespace.load() != my_pid_namespace_) return absl::OkStatus();
    if (kill(pid, 0) == 0 || errno != ESRCH) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("rank ", q, " (pid ", pid, ") is gone"));
  }

  const ShmSegment segment_;
  const int rank_;
  const int world_;
  const ShmOptions options_;
  const int64_t slot_floats_;
  const uint64_t my_pid_namespace_;
  SegmentHeader* header_ = nullptr;
  RankState* ranks_ = nullptr;  // [world]
  float* slots_ = nullptr;      // [world][2][slot_floats]

  // Driving thread only.
  uint32_t posted_ = 0;      // the last collective this rank posted
  uint32_t all_posted_ = 0;  // every rank is known to have posted at least this
  absl::Status failure_;     // the first failed collective's

  std::atomic<bool> aborted_{false};
};

absl::Status CheckOptions(Store* store, int rank, int world_size, const ShmOptions& o) {
  if (store == nullptr) return absl::InvalidArgumentError("shm: no store");
  if (world_size < 1 || world_size > kMaxWorld || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("shm: rank ", rank, " outside a world of ",
                                                   world_size, " (at most ", kMaxWorld, ")"));
  }
  if (o.timeout <= absl::ZeroDuration() || o.liveness_check <= absl::ZeroDuration() ||
      o.spin < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("shm: the timeout and liveness check must be positive");
  }
  if (o.slot_bytes < 64 || o.slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm: slot_bytes ", o.slot_bytes, " is not a positive multiple of 64"));
  }
  return absl::OkStatus();
}

// Rank 0: makes the segment, publishes its name, waits until every peer has mapped it and
// unlinks the name (whatever happened).
absl::StatusOr<ShmSegment> CreateAndShare(Store* store, int world_size, const ShmOptions& o) {
  for (const std::string& stale : shm::RemoveStaleSegments()) {
    LOG(INFO) << "shm: removed the segment of a killed world: " << stale;
  }
  const std::string name = shm::NewSegmentName();
  const Layout layout = LayoutFor(world_size, o.slot_bytes);
  absl::StatusOr<ShmSegment> segment = ShmSegment::Create(name, layout.bytes);
  if (!segment.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("shm: ", segment.status().message()));
  }
  auto* header = static_cast<SegmentHeader*>(segment->data());
  header->magic = kMagic;
  header->world_size = static_cast<uint64_t>(world_size);
  header->slot_bytes = static_cast<uint64_t>(o.slot_bytes);
  absl::Status shared = store->Set(o.prefix + "shm/segment", name);
  if (shared.ok() && world_size > 1) {
    std::vector<std::string> keys;
    for (int q = 1; q < world_size; ++q) keys.push_back(absl::StrCat(o.prefix, "shm/mapped/", q));
    shared = store->Wait(keys, o.timeout);
  }
  (void)ShmSegment::Unlink(name);
  if (!shared.ok()) {
    return absl::Status(shared.code(),
                        absl::StrCat("shm rank 0: sharing the segment: ", shared.message()));
  }
  return segment;
}

// Ranks > 0: maps the segment rank 0 published and says so.
absl::StatusOr<ShmSegment> MapShared(Store* store, int rank, int world_size, const ShmOptions& o) {
  absl::StatusOr<std::string> name = store->Get(o.prefix + "shm/segment", o.timeout);
  if (!name.ok()) {
    return absl::Status(name.status().code(),
                        absl::StrCat("shm rank ", rank, ": waiting for the segment's name: ",
                                     name.status().message()));
  }
  // The name comes from a peer: only a tpserve segment, never a path.
  if (!absl::StartsWith(*name, "/tpserve-shm.") || name->find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm rank ", rank, ": '", *name, "' is not a tpserve segment name"));
  }
  const Layout layout = LayoutFor(world_size, o.slot_bytes);
  absl::StatusOr<ShmSegment> segment = ShmSegment::Open(*name, layout.bytes);
  if (!segment.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shm rank ", rank, ": ", segment.status().message(),
                     " (shared memory needs every rank on one host)"));
  }
  const auto* header = static_cast<const SegmentHeader*>(segment->data());
  if (header->magic != kMagic || header->world_size != static_cast<uint64_t>(world_size) ||
      header->slot_bytes != static_cast<uint64_t>(o.slot_bytes)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shm rank ", rank, ": segment '", *name, "' is not this world's (world ",
                     header->world_size, ", slots of ", header->slot_bytes, " bytes)"));
  }
  return segment;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateShmCommunicator(Store* store, int rank,
                                                                    int world_size,
                                                                    const ShmOptions& options) {
  RETURN_IF_ERROR(CheckOptions(store, rank, world_size, options));
  absl::StatusOr<ShmSegment> segment = rank == 0 ? CreateAndShare(store, world_size, options)
                                                 : MapShared(store, rank, world_size, options);
  if (!segment.ok()) return segment.status();
  const Layout layout = LayoutFor(world_size, options.slot_bytes);
  auto* me =
      reinterpret_cast<RankState*>(static_cast<char*>(segment->data()) + layout.ranks_offset) +
      rank;
  me->pid.store(getpid());
  me->pid_namespace.store(shm::PidNamespace());
  if (rank > 0) {
    RETURN_IF_ERROR(store->Set(absl::StrCat(options.prefix, "shm/mapped/", rank), "1"));
  }
  return std::make_unique<ShmCommunicator>(*std::move(segment), rank, world_size, options);
}

}  // namespace tpserve::comm
