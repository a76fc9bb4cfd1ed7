#include "server/coordinator/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace tpserve::coordinator {
namespace {

constexpr absl::string_view kScheme = "Bearer ";

ApiKeys::Digest Sha256(absl::string_view data) {
  ApiKeys::Digest digest{};
  unsigned int length = 0;
  CHECK_EQ(EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr), 1);
  CHECK_EQ(length, digest.size());
  return digest;
}

}  // namespace

std::vector<std::string> ParseApiKeys(absl::string_view text) {
  std::vector<std::string> keys;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    keys.emplace_back(line);
  }
  return keys;
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(const std::string& path,
                                                       absl::Duration check_interval) {
  std::unique_ptr<ApiKeys> keys(new ApiKeys(path, check_interval));
  absl::MutexLock lock(&keys->mu_);
  if (absl::Status read = keys->ReadLocked(); !read.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--api_key_file: ", read.message()));
  }
  if (keys->digests_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--api_key_file: ", path, " holds no key (one per line; # comments)"));
  }
  keys->last_check_ = absl::Now();
  return keys;
}

absl::Status ApiKeys::ReadLocked() {
  struct stat st {};
  if (stat(path_.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path_, ": ", std::strerror(errno)));
  }
  std::ifstream in(path_, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path_));
  std::vector<Digest> digests;
  for (const std::string& key : ParseApiKeys(text.str())) digests.push_back(Sha256(key));
  digests_ = std::move(digests);
  version_ = {st.st_mtim, st.st_size, st.st_ino};
  return absl::OkStatus();
}

void ApiKeys::ReloadIfChangedLocked() {
  struct stat st {};
  if (stat(path_.c_str(), &st) != 0) {
    LOG_EVERY_N(WARNING, 100) << "api keys: cannot stat " << path_ << ": " << std::strerror(errno)
                              << "; keeping the " << digests_.size() << " keys read before";
    return;
  }
  if (FileVersion{st.st_mtim, st.st_size, st.st_ino} == version_) return;
  if (absl::Status read = ReadLocked(); !read.ok()) {
    LOG(WARNING) << "api keys: " << read.message() << "; keeping the " << digests_.size()
                 << " keys read before";
    return;
  }
  LOG(INFO) << "api keys: reloaded " << path_ << " (" << digests_.size() << " keys)";
}

void ApiKeys::ReloadIfChanged() {
  absl::MutexLock lock(&mu_);
  last_check_ = absl::Now();
  ReloadIfChangedLocked();
}

size_t ApiKeys::size() const {
  absl::MutexLock lock(&mu_);
  return digests_.size();
}

absl::Status ApiKeys::Check(absl::string_view authorization) {
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "missing API key: send the metadata 'authorization: Bearer <key>'");
  }
  if (authorization.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError(
        "the authorization metadata is not of the form 'Bearer <key>'");
  }
  const absl::string_view key = absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
  if (key.empty()) return absl::UnauthenticatedError("empty API key after 'Bearer '");
  const Digest presented = Sha256(key);
  absl::MutexLock lock(&mu_);
  if (const absl::Time now = absl::Now(); now - last_check_ >= check_interval_) {
    last_check_ = now;
    ReloadIfChangedLocked();
  }
  // Every key compared, no early exit: the time taken does not tell which key matched.
  int matches = 0;
  for (const Digest& d : digests_) {
    matches |= CRYPTO_memcmp(d.data(), presented.data(), d.size()) == 0;
  }
  if (matches == 0) return absl::UnauthenticatedError("API key not accepted");
  return absl::OkStatus();
}

}  // namespace tpserve::coordinator
