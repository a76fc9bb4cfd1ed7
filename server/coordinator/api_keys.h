// ApiKeys: the API keys of the public port, read from a file (one key per line; blank lines
// and lines starting with '#' ignored) and re-read when the file changes (its mtime, size or
// inode; looked at most once per check interval, from the calls that check keys). Keys are
// held as SHA-256 digests and compared in constant time (CRYPTO_memcmp against every key, no
// early exit), so neither the key nor its length leaks through timing. A reload that cannot
// read the file keeps the keys it had. Thread-safe.
#ifndef TPSERVE_SERVER_COORDINATOR_API_KEYS_H_
#define TPSERVE_SERVER_COORDINATOR_API_KEYS_H_

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tpserve::coordinator {

// The keys of a key file's text, in order: each line stripped of surrounding whitespace;
// blank lines and lines starting with '#' left out.
std::vector<std::string> ParseApiKeys(absl::string_view text);

class ApiKeys {
 public:
  using Digest = std::array<unsigned char, 32>;  // SHA-256

  // Reads `path`; InvalidArgument naming --api_key_file when it cannot be read or holds no
  // key. `check_interval`: how often at most Check looks whether the file changed.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(
      const std::string& path, absl::Duration check_interval = absl::Seconds(1));

  // OK when `authorization` (the value of the request's "authorization" metadata, empty when
  // absent) is "Bearer KEY" with KEY one of the current keys; Unauthenticated saying what is
  // missing or wrong otherwise (never quoting the key).
  absl::Status Check(absl::string_view authorization) ABSL_LOCKS_EXCLUDED(mu_);

  // Re-reads the file now if it changed since it was last read.
  void ReloadIfChanged() ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What identifies one version of the file.
  struct FileVersion {
    timespec mtime{};
    off_t size = 0;
    ino_t inode = 0;
    bool operator==(const FileVersion& o) const {
      return mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec && size == o.size &&
             inode == o.inode;
    }
  };

  ApiKeys(std::string path, absl::Duration check_interval)
      : path_(std::move(path)), check_interval_(check_interval) {}
  // Reads the file into digests_; the error names the file.
  absl::Status ReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReloadIfChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const absl::Duration check_interval_;
  mutable absl::Mutex mu_;
  std::vector<Digest> digests_ ABSL_GUARDED_BY(mu_);
  FileVersion version_ ABSL_GUARDED_BY(mu_);
  absl::Time last_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_API_KEYS_H_
