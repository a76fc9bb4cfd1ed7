#include "server/comm/shm/shm_segment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace tpserve::comm::shm {
namespace {

constexpr absl::string_view kPrefix = "tpserve-shm.";

absl::Status Errno(absl::string_view what, const std::string& name) {
  const int e = errno;
  return absl::ErrnoToStatus(e, absl::StrCat("shared memory ", what, " '", name, "'"));
}

absl::StatusOr<void*> Map(int fd, size_t bytes, const std::string& name) {
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return Errno("mmap", name);
  return data;
}

}  // namespace

absl::StatusOr<ShmSegment> ShmSegment::Create(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("create", name);
  // ftruncate on tmpfs succeeds even when the pages cannot be had later (SIGBUS on first
  // touch); fallocate reserves them now, so a full /dev/shm is an error here instead.
  int err = ftruncate(fd, static_cast<off_t>(bytes)) == 0
                ? posix_fallocate(fd, 0, static_cast<off_t>(bytes))
                : errno;
  if (err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    errno = err;
    return Errno(absl::StrCat("reserve ", bytes, " bytes of"), name);
  }
  absl::StatusOr<void*> data = Map(fd, bytes, name);
  close(fd);
  if (!data.ok()) {
    shm_unlink(name.c_str());
    return data.status();
  }
  return ShmSegment(*data, bytes);
}

absl::StatusOr<ShmSegment> ShmSegment::Open(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return Errno("open", name);
  struct stat st = {};
  if (fstat(fd, &st) != 0) {
    absl::Status status = Errno("stat", name);
    close(fd);
    return status;
  }
  if (static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory '", name, "' holds ", st.st_size, " bytes, expected ", bytes));
  }
  absl::StatusOr<void*> data = Map(fd, bytes, name);
  close(fd);
  if (!data.ok()) return data.status();
  return ShmSegment(*data, bytes);
}

absl::Status ShmSegment::Unlink(const std::string& name) {
  if (shm_unlink(name.c_str()) != 0) return Errno("unlink", name);
  return absl::OkStatus();
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) munmap(data_, size_);
}

uint64_t PidNamespace() {
  // "pid:[4026531836]"
  char link[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
  if (n <= 0) return 0;
  const absl::string_view text(link, static_cast<size_t>(n));
  const size_t open = text.find('['), close = text.find(']');
  uint64_t inode = 0;
  if (open == absl::string_view::npos || close == absl::string_view::npos || close < open ||
      !absl::SimpleAtoi(text.substr(open + 1, close - open - 1), &inode)) {
    return 0;
  }
  return inode;
}

std::string NewSegmentName() {
  std::random_device entropy;
  const uint64_t tag = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  return absl::StrFormat("/%s%d.%d.%016x", kPrefix, PidNamespace(), getpid(), tag);
}

std::vector<std::string> RemoveStaleSegments(const std::string& dir) {
  std::vector<std::string> removed;
  const std::string pid_ns = absl::StrCat(PidNamespace());
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string file = entry.path().filename().string();
    if (!absl::StartsWith(file, kPrefix)) continue;
    // tpserve-shm.<pid ns>.<pid>.<tag>
    const std::vector<absl::string_view> parts = absl::StrSplit(file, '.');
    int pid = 0;
    if (parts.size() != 4 || parts[1] != pid_ns || !absl::SimpleAtoi(parts[2], &pid) || pid <= 0) {
      continue;
    }
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    if (std::filesystem::remove(entry.path(), error)) removed.push_back(file);
  }
  return removed;
}

}  // namespace tpserve::comm::shm
