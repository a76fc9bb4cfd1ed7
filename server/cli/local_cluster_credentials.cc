#include "server/cli/local_cluster_credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/ephemeral_ca.h"

namespace tpserve::cli {
namespace {

// A sealed memfd holding `text`, inherited by children (no close-on-exec), or Internal.
absl::StatusOr<int> SealedMemfd(const char* name, const std::string& text) {
  const int fd = memfd_create(name, MFD_ALLOW_SEALING);
  if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", strerror(errno)));
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("memfd write: ", strerror(error)));
    }
    written += static_cast<size_t>(n);
  }
  // Read-only from now on, for this process and the children alike.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    const int error = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("memfd seal: ", strerror(error)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalClusterCredentials>> LocalClusterCredentials::Create(
    absl::Duration validity) {
  absl::StatusOr<std::unique_ptr<EphemeralCa>> ca =
      EphemeralCa::Create("tpserve serve ephemeral cluster CA", validity);
  if (!ca.ok()) return ca.status();
  const std::vector<std::string> dns = {"localhost"};
  const std::vector<std::string> ips = {"127.0.0.1"};
  absl::StatusOr<PemKeyPair> worker = (*ca)->Issue("tpserve worker", dns, ips);
  if (!worker.ok()) return worker.status();
  absl::StatusOr<PemKeyPair> coordinator = (*ca)->Issue("tpserve coordinator", dns, ips);
  if (!coordinator.ok()) return coordinator.status();
  std::unique_ptr<LocalClusterCredentials> c(new LocalClusterCredentials());
  c->coordinator_ = {(*ca)->cert_pem(), coordinator->cert, coordinator->key};
  for (const auto& [fd, name, text] :
       {std::tuple{&c->ca_fd_, "tpserve-cluster-ca", (*ca)->cert_pem()},
        std::tuple{&c->cert_fd_, "tpserve-worker-cert", worker->cert},
        std::tuple{&c->key_fd_, "tpserve-worker-key", worker->key}}) {
    absl::StatusOr<int> made = SealedMemfd(name, text);
    if (!made.ok()) return made.status();  // the destructor closes the others
    *fd = *made;
  }
  return c;
}

LocalClusterCredentials::~LocalClusterCredentials() {
  for (int fd : {ca_fd_, cert_fd_, key_fd_}) {
    if (fd >= 0) close(fd);
  }
}

std::vector<std::string> LocalClusterCredentials::worker_args() const {
  return {absl::StrCat("--cluster_ca_file=/proc/self/fd/", ca_fd_),
          absl::StrCat("--cluster_cert_file=/proc/self/fd/", cert_fd_),
          absl::StrCat("--cluster_key_file=/proc/self/fd/", key_fd_)};
}

}  // namespace tpserve::cli
