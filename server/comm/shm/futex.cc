#include "server/comm/shm/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace tpserve::comm::shm {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "a futex word is a plain 32-bit integer");

void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return;
  const timespec relative = absl::ToTimespec(timeout);
  // EAGAIN (the word changed), EINTR and ETIMEDOUT all mean "look again".
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, &relative,
          nullptr, 0);
}

void FutexWakeAll(const std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

}  // namespace tpserve::comm::shm
