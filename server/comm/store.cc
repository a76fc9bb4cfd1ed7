#include "server/comm/store.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tpserve::comm {

absl::Status InMemoryStore::PutLocked(const std::string& key, std::string value) {
  auto it = values_.find(key);
  const size_t before = it == values_.end() ? 0 : key.size() + it->second.size();
  const size_t after = key.size() + value.size();
  if (bytes_ - before + after > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "store: setting key '", key, "' would pass the store's limit of ", max_bytes_, " bytes"));
  }
  bytes_ = bytes_ - before + after;
  values_[key] = std::move(value);
  return absl::OkStatus();
}

absl::Status InMemoryStore::Set(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  return PutLocked(key, value);
}

absl::StatusOr<std::string> InMemoryStore::Get(const std::string& key, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto present = [this, &key]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return values_.contains(key); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("store: key '", key, "' not set within ", absl::FormatDuration(timeout)));
  }
  return values_[key];
}

absl::Status InMemoryStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const std::string& key : keys) {
    auto value = Get(key, deadline - absl::Now());
    if (!value.ok()) return value.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> InMemoryStore::Add(const std::string& key, int64_t delta) {
  absl::MutexLock lock(&mu_);
  int64_t current = 0;
  if (auto it = values_.find(key); it != values_.end() && !absl::SimpleAtoi(it->second, &current)) {
    return absl::InvalidArgumentError(absl::StrCat("store: key '", key, "' is not an integer"));
  }
  current += delta;
  if (absl::Status put = PutLocked(key, absl::StrCat(current)); !put.ok()) return put;
  return current;
}

void InMemoryStore::EraseWithPrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(values_, [&](const auto& kv) {
    if (!absl::StartsWith(kv.first, prefix)) return false;
    bytes_ -= kv.first.size() + kv.second.size();
    return true;
  });
}

}  // namespace tpserve::comm
