// Futex: wait on and wake a 32-bit word that may live in memory shared between processes
// (shared futexes, not FUTEX_PRIVATE). The thin layer between the shared-memory collectives
// and the kernel; stateless and thread-safe.
#ifndef TPSERVE_SERVER_COMM_SHM_FUTEX_H_
#define TPSERVE_SERVER_COMM_SHM_FUTEX_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace tpserve::comm::shm {

// Sleeps while *word == expected, at most `timeout` (spurious wake-ups and signals return
// early: callers re-check their condition). Returns at once when *word != expected.
void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout);

// Wakes every thread sleeping on `word`, in any process that maps it.
void FutexWakeAll(const std::atomic<uint32_t>* word);

}  // namespace tpserve::comm::shm

#endif  // TPSERVE_SERVER_COMM_SHM_FUTEX_H_
