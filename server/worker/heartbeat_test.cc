// Heartbeat: beats at its interval (never faster), not before the first interval, and not
// after Stop; Stop wakes a thread waiting out a long interval at once; a failed beat ends it.
#include "server/worker/heartbeat.h"

#include <atomic>

#include "gtest/gtest.h"

namespace tpserve::worker {
namespace {

// Waits (bounded by a generous deadline) until `count` reaches `n`.
bool AwaitCount(const std::atomic<int>& count, int n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (count.load() < n && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  return count.load() >= n;
}

TEST(HeartbeatTest, BeatsEveryIntervalUntilStopped) {
  std::atomic<int> beats{0};
  const absl::Time start = absl::Now();
  Heartbeat heartbeat(absl::Milliseconds(20), [&] {
    ++beats;
    return true;
  });
  ASSERT_TRUE(AwaitCount(beats, 5));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));  // five intervals at least
  heartbeat.Stop();
  const int stopped_at = beats.load();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(beats.load(), stopped_at);
  heartbeat.Stop();  // idempotent
}

TEST(HeartbeatTest, StopWakesAThreadWaitingOutALongInterval) {
  std::atomic<int> beats{0};
  Heartbeat heartbeat(absl::Hours(1), [&] {
    ++beats;
    return true;
  });
  const absl::Time start = absl::Now();
  heartbeat.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // not the hour
  EXPECT_EQ(beats.load(), 0);
}

TEST(HeartbeatTest, AFailedBeatEndsTheBeats) {
  std::atomic<int> beats{0};
  Heartbeat heartbeat(absl::Milliseconds(10), [&] {
    ++beats;
    return false;  // the stream is gone
  });
  ASSERT_TRUE(AwaitCount(beats, 1));
  absl::SleepFor(absl::Milliseconds(200));  // twenty intervals
  EXPECT_EQ(beats.load(), 1);
}

TEST(HeartbeatTest, DestructionStops) {
  std::atomic<int> beats{0};
  {
    Heartbeat heartbeat(absl::Milliseconds(5), [&] {
      ++beats;
      return true;
    });
    ASSERT_TRUE(AwaitCount(beats, 2));
  }
  const int after = beats.load();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(beats.load(), after);
}

}  // namespace
}  // namespace tpserve::worker
