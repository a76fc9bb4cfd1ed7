#include "server/comm/host_layout.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tpserve::comm {
namespace {

constexpr size_t kMaxIdentityBytes = 256;

}  // namespace

bool HostLayout::OneHost() const {
  return std::all_of(hosts.begin(), hosts.end(),
                     [&](const std::string& h) { return h == hosts.front(); });
}

int HostLayout::RanksOnHostOf(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(hosts.size())) return 1;
  return static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[rank]));
}

std::string LocalHostIdentity() {
  std::string boot_id;
  std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot_id);
  boot_id = std::string(absl::StripAsciiWhitespace(boot_id));
  struct stat st = {};
  if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode)) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    return absl::StrCat(name, "/", getpid(), "/no-shm");
  }
  return absl::StrCat(boot_id, "/", st.st_dev, ":", st.st_ino);
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

absl::StatusOr<HostLayout> ExchangeHostIdentities(Store* store, const std::string& prefix, int rank,
                                                  int world_size, const std::string& identity,
                                                  absl::Duration timeout) {
  if (absl::Status set = store->Set(absl::StrCat(prefix, "host/", rank), identity); !set.ok()) {
    return set;
  }
  HostLayout layout;
  for (int r = 0; r < world_size; ++r) {
    absl::StatusOr<std::string> host = store->Get(absl::StrCat(prefix, "host/", r), timeout);
    if (!host.ok()) return host.status();
    if (host->empty() || host->size() > kMaxIdentityBytes) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, "'s host identity holds ",
                                                     host->size(), " bytes (want 1 to ",
                                                     kMaxIdentityBytes, ")"));
    }
    layout.hosts.push_back(*std::move(host));
  }
  return layout;
}

}  // namespace tpserve::comm
