// ShmSegment: one POSIX shared-memory segment mapped into this process (shm_open + mmap),
// and the naming rule that lets a later world remove the segments of a killed one. A segment
// is named "/tpserve-shm.<pid namespace>.<creator pid>.<tag>" and made with mode 0600 (only
// this user may map it). Owns the mapping (unmapped on destruction), never the name: the
// creator unlinks it once every rank has mapped it. Movable, not copyable; not thread-safe.
#ifndef TPSERVE_SERVER_COMM_SHM_SHM_SEGMENT_H_
#define TPSERVE_SERVER_COMM_SHM_SHM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpserve::comm::shm {

class ShmSegment {
 public:
  // Creates `name` (it must not exist) with `bytes` zero bytes and maps it.
  static absl::StatusOr<ShmSegment> Create(const std::string& name, size_t bytes);
  // Maps the existing segment `name`, which must hold exactly `bytes`.
  static absl::StatusOr<ShmSegment> Open(const std::string& name, size_t bytes);
  // Removes the name (mappings stay valid); NotFound when it is already gone.
  static absl::Status Unlink(const std::string& name);

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  ShmSegment(void* data, size_t size) : data_(data), size_(size) {}
  void* data_ = nullptr;
  size_t size_ = 0;
};

// The inode number of this process's pid namespace (0 when /proc does not tell).
uint64_t PidNamespace();

// A fresh segment name for this process: "/tpserve-shm.<pid ns>.<pid>.<16 random hex digits>".
std::string NewSegmentName();

// Unlinks every tpserve segment in `dir` (normally /dev/shm) whose creator lived in this pid
// namespace and no longer runs: what a world killed between creating and sharing its segment
// left behind. Returns the names it removed.
std::vector<std::string> RemoveStaleSegments(const std::string& dir = "/dev/shm");

}  // namespace tpserve::comm::shm

#endif  // TPSERVE_SERVER_COMM_SHM_SHM_SEGMENT_H_
