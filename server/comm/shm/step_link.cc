#include "server/comm/shm/step_link.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "server/comm/shm/futex.h"

namespace tpserve::comm {
namespace {

constexpr uint64_t kMagic = 0x32766b6e696c7074;  // "tplinkv2"
constexpr int kMaxWorld = 1024;

struct alignas(64) Header {
  uint64_t magic;
  uint64_t world_size;
};

struct alignas(64) Doorbell {
  std::atomic<uint32_t> count;     // futex word: rings so far
  std::atomic<uint32_t> sleepers;  // threads asleep on `count`
};

struct alignas(64) Slot {
  std::atomic<uint64_t> id;  // the message's step id, written after its bytes
  uint64_t size;             // bytes that follow the slot header
};

}  // namespace

// Byte offsets in the segment.
struct ShmStepLink::Layout {
  static constexpr int64_t kCoordinatorBell = sizeof(Header);
  static constexpr int64_t kStepSlot = kCoordinatorBell + sizeof(Doorbell);
  static constexpr int64_t kStepData = kStepSlot + sizeof(Slot);
  static constexpr int64_t kMasksSlot = kStepData + kStepBytes;
  static constexpr int64_t kMasksData = kMasksSlot + sizeof(Slot);
  static constexpr int64_t kRanks = kMasksData + kMasksBytes;
  static constexpr int64_t kRankStride = sizeof(Doorbell) + sizeof(Slot) + kResultBytes;
  static int64_t Bell(int side) {
    return side == kCoordinator ? kCoordinatorBell : kRanks + side * kRankStride;
  }
  static int64_t ResultSlot(int rank) { return kRanks + rank * kRankStride + sizeof(Doorbell); }
  static int64_t ResultData(int rank) { return ResultSlot(rank) + sizeof(Slot); }
  static int64_t Bytes(int world_size) { return kRanks + world_size * kRankStride; }
};

ShmStepLink::ShmStepLink(shm::ShmSegment segment, std::string name, int side, int world_size)
    : segment_(std::move(segment)), name_(std::move(name)), side_(side), world_size_(world_size) {}

absl::StatusOr<std::unique_ptr<ShmStepLink>> ShmStepLink::Create(int world_size) {
  if (world_size < 1 || world_size > kMaxWorld) {
    return absl::InvalidArgumentError(absl::StrCat("step link: world of ", world_size));
  }
  for (const std::string& stale : shm::RemoveStaleSegments()) {
    LOG(INFO) << "shm: removed the segment of a killed world: " << stale;
  }
  const std::string name = shm::NewSegmentName();
  absl::StatusOr<shm::ShmSegment> segment =
      shm::ShmSegment::Create(name, Layout::Bytes(world_size));
  if (!segment.ok()) return segment.status();
  auto* header = static_cast<Header*>(segment->data());
  header->magic = kMagic;
  header->world_size = static_cast<uint64_t>(world_size);
  return std::unique_ptr<ShmStepLink>(
      new ShmStepLink(*std::move(segment), name, kCoordinator, world_size));
}

absl::StatusOr<std::unique_ptr<ShmStepLink>> ShmStepLink::Open(const std::string& name, int rank,
                                                               int world_size) {
  // The name comes from the coordinator: only a tpserve segment, never a path.
  if (!absl::StartsWith(name, "/tpserve-shm.") || name.find('/', 1) != std::string::npos ||
      name.size() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("step link: '", name, "' is not a tpserve segment name"));
  }
  if (world_size < 1 || world_size > kMaxWorld || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("step link: rank ", rank, " outside a world of ", world_size));
  }
  absl::StatusOr<shm::ShmSegment> segment = shm::ShmSegment::Open(name, Layout::Bytes(world_size));
  if (!segment.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("step link: ", segment.status().message()));
  }
  const auto* header = static_cast<const Header*>(segment->data());
  if (header->magic != kMagic || header->world_size != static_cast<uint64_t>(world_size)) {
    return absl::FailedPreconditionError(
        absl::StrCat("step link: '", name, "' is not a link of a world of ", world_size));
  }
  return std::unique_ptr<ShmStepLink>(new ShmStepLink(*std::move(segment), name, rank, world_size));
}

void ShmStepLink::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  (void)shm::ShmSegment::Unlink(name_);
}

char* ShmStepLink::At(int64_t offset) const { return static_cast<char*>(segment_.data()) + offset; }

void ShmStepLink::RingSide(int side) {
  auto* bell = reinterpret_cast<Doorbell*>(At(Layout::Bell(side)));
  bell->count.fetch_add(1, std::memory_order_seq_cst);
  if (bell->sleepers.load(std::memory_order_seq_cst) != 0) shm::FutexWakeAll(&bell->count);
}

bool ShmStepLink::PostStep(uint64_t id, absl::string_view bytes) {
  if (static_cast<int64_t>(bytes.size()) > kStepBytes) return false;
  auto* slot = reinterpret_cast<Slot*>(At(Layout::kStepSlot));
  std::memcpy(At(Layout::kStepData), bytes.data(), bytes.size());
  slot->size = bytes.size();
  slot->id.store(id, std::memory_order_release);
  for (int r = 0; r < world_size_; ++r) RingSide(r);
  return true;
}

std::optional<std::pair<uint64_t, absl::string_view>> ShmStepLink::NewStep(uint64_t seen_id) const {
  const auto* slot = reinterpret_cast<const Slot*>(At(Layout::kStepSlot));
  const uint64_t id = slot->id.load(std::memory_order_acquire);
  if (id == 0 || id == seen_id) return std::nullopt;
  const uint64_t size = std::min<uint64_t>(slot->size, kStepBytes);
  return std::make_pair(id, absl::string_view(At(Layout::kStepData), size));
}

bool ShmStepLink::PostMasks(uint64_t id, absl::string_view bytes) {
  if (static_cast<int64_t>(bytes.size()) > kMasksBytes) return false;
  auto* slot = reinterpret_cast<Slot*>(At(Layout::kMasksSlot));
  std::memcpy(At(Layout::kMasksData), bytes.data(), bytes.size());
  slot->size = bytes.size();
  slot->id.store(id, std::memory_order_release);
  RingSide(0);
  return true;
}

std::optional<absl::string_view> ShmStepLink::Masks(uint64_t id) const {
  const auto* slot = reinterpret_cast<const Slot*>(At(Layout::kMasksSlot));
  if (slot->id.load(std::memory_order_acquire) != id) return std::nullopt;
  return absl::string_view(At(Layout::kMasksData), std::min<uint64_t>(slot->size, kMasksBytes));
}

absl::Status ShmStepLink::PostResult(uint64_t id, absl::string_view bytes) {
  if (static_cast<int64_t>(bytes.size()) > kResultBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("step link: a result of ", bytes.size(),
                                                     " bytes exceeds the slot of ", kResultBytes));
  }
  auto* slot = reinterpret_cast<Slot*>(At(Layout::ResultSlot(side_)));
  std::memcpy(At(Layout::ResultData(side_)), bytes.data(), bytes.size());
  slot->size = bytes.size();
  slot->id.store(id, std::memory_order_release);
  RingSide(kCoordinator);
  return absl::OkStatus();
}

std::optional<absl::string_view> ShmStepLink::Result(int rank, uint64_t id) const {
  if (rank < 0 || rank >= world_size_) return std::nullopt;
  const auto* slot = reinterpret_cast<const Slot*>(At(Layout::ResultSlot(rank)));
  if (slot->id.load(std::memory_order_acquire) != id) return std::nullopt;
  return absl::string_view(At(Layout::ResultData(rank)),
                           std::min<uint64_t>(slot->size, kResultBytes));
}

uint32_t ShmStepLink::Bell() const {
  return reinterpret_cast<const Doorbell*>(At(Layout::Bell(side_)))
      ->count.load(std::memory_order_seq_cst);
}

void ShmStepLink::Wait(uint32_t seen, absl::Time deadline) const {
  auto* bell = reinterpret_cast<Doorbell*>(At(Layout::Bell(side_)));
  bell->sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (bell->count.load(std::memory_order_seq_cst) == seen) {
    shm::FutexWait(&bell->count, seen, deadline - absl::Now());
  }
  bell->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void ShmStepLink::Ring() { RingSide(side_); }

void ShmStepLink::Nudge() { RingSide(kCoordinator); }

}  // namespace tpserve::comm
