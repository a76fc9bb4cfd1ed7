// ShmStepLink: a coordinator and two workers as threads (each maps the segment itself) pass
// a thousand steps (every other one with masks for rank 0) and results of varying sizes; oversized
// messages are refused; a side's own Ring wakes its waiting thread at once; names that are not
// links are refused.
#include "server/comm/shm/step_link.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tpserve::comm {
namespace {

constexpr int kWorld = 2;

std::string Payload(uint64_t id, int rank, size_t size) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>((id * 31 + rank * 7 + i) % 251);
  return s;
}

TEST(ShmStepLinkTest, StepsOutResultsBackInOrder) {
  auto coordinator = ShmStepLink::Create(kWorld);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  std::vector<std::unique_ptr<ShmStepLink>> workers;
  for (int r = 0; r < kWorld; ++r) {
    auto w = ShmStepLink::Open((*coordinator)->name(), r, kWorld);
    ASSERT_TRUE(w.ok()) << w.status();
    workers.push_back(*std::move(w));
  }
  (*coordinator)->Unlink();
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + (*coordinator)->name()));
  constexpr uint64_t kSteps = 1000;
  std::vector<int> errors(kWorld, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      ShmStepLink& link = *workers[r];
      uint64_t seen = 0;
      while (seen < kSteps) {
        const uint32_t bell = link.Bell();
        auto step = link.NewStep(seen);
        if (!step.has_value()) {
          link.Wait(bell, absl::Now() + absl::Seconds(10));
          continue;
        }
        seen = step->first;
        if (step->second != Payload(seen, -1, seen % 97 * 13)) ++errors[r];
        if (r == 0 && seen % 2 == 0) {  // even steps' masks follow, to rank 0
          const absl::Time deadline = absl::Now() + absl::Seconds(10);
          std::optional<absl::string_view> masks;
          while (!(masks = link.Masks(seen)).has_value() && absl::Now() < deadline) {
            const uint32_t rung = link.Bell();
            if (!link.Masks(seen).has_value()) link.Wait(rung, deadline);
          }
          if (!masks.has_value() || *masks != Payload(seen, -2, seen % 53 * 17)) ++errors[r];
        }
        if (!link.PostResult(seen, Payload(seen, r, seen % 89 * (r + 1))).ok()) ++errors[r];
      }
    });
  }
  int bad = 0;
  for (uint64_t id = 1; id <= kSteps; ++id) {
    ASSERT_TRUE((*coordinator)->PostStep(id, Payload(id, -1, id % 97 * 13)));
    if (id % 2 == 0) ASSERT_TRUE((*coordinator)->PostMasks(id, Payload(id, -2, id % 53 * 17)));
    for (int r = 0; r < kWorld; ++r) {
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      while (true) {
        const uint32_t bell = (*coordinator)->Bell();
        if (auto result = (*coordinator)->Result(r, id)) {
          bad += *result != Payload(id, r, id % 89 * (r + 1));
          break;
        }
        ASSERT_LT(absl::Now(), deadline) << "no result of step " << id << " from rank " << r;
        (*coordinator)->Wait(bell, deadline);
      }
    }
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(errors, std::vector<int>(kWorld, 0));
}

TEST(ShmStepLinkTest, RefusesOversizedMessagesAndForeignNames) {
  auto coordinator = ShmStepLink::Create(1);
  ASSERT_TRUE(coordinator.ok());
  auto worker = ShmStepLink::Open((*coordinator)->name(), 0, 1);
  ASSERT_TRUE(worker.ok());
  EXPECT_FALSE((*coordinator)->PostStep(1, std::string(ShmStepLink::kStepBytes + 1, 'x')));
  EXPECT_FALSE((*worker)->NewStep(0).has_value()) << "a refused step is not posted";
  EXPECT_FALSE((*coordinator)->PostMasks(1, std::string(ShmStepLink::kMasksBytes + 1, 'x')));
  EXPECT_FALSE((*worker)->Masks(1).has_value()) << "refused masks are not posted";
  EXPECT_EQ((*worker)->PostResult(1, std::string(ShmStepLink::kResultBytes + 1, 'x')).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ShmStepLink::Open((*coordinator)->name(), 0, 2).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "a link of another world size";
  EXPECT_EQ(ShmStepLink::Open("/etc/passwd", 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmStepLink::Open("/tpserve-shm.1.1.nothere", 0, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  (*coordinator)->Unlink();
}

TEST(ShmStepLinkTest, RingWakesTheWaitingThreadOfThatSide) {
  auto coordinator = ShmStepLink::Create(1);
  ASSERT_TRUE(coordinator.ok());
  absl::Duration waited;
  const uint32_t bell = (*coordinator)->Bell();
  std::thread waiter([&] {
    const absl::Time start = absl::Now();
    (*coordinator)->Wait(bell, start + absl::Seconds(30));
    waited = absl::Now() - start;
  });
  absl::SleepFor(absl::Milliseconds(100));
  (*coordinator)->Ring();
  waiter.join();
  EXPECT_LT(waited, absl::Seconds(5));
  EXPECT_GE(waited, absl::Milliseconds(50));
  (*coordinator)->Unlink();
}

}  // namespace
}  // namespace tpserve::comm
