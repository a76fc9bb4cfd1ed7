#include "server/worker/model_root.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tpserve::worker {
namespace {

// realpath(3), or empty when it fails.
std::string RealPath(const std::string& path) {
  std::unique_ptr<char, decltype(&free)> real(realpath(path.c_str(), nullptr), free);
  return real == nullptr ? std::string() : std::string(real.get());
}

}  // namespace

absl::StatusOr<ModelRoot> ModelRoot::Open(const std::string& dir) {
  const std::string real = dir.empty() ? std::string() : RealPath(dir);
  struct stat st {};
  if (real.empty() || ::stat(real.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model_root: '", dir, "' is not an existing directory"));
  }
  return ModelRoot(real);
}

std::string ModelRoot::DefaultFor(const std::string& model_path) {
  std::string path = RealPath(model_path);  // a symlinked model: where it really lies
  if (path.empty()) path = model_path;
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) return path;
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

absl::StatusOr<std::string> ModelRoot::Resolve(const std::string& path) const {
  if (dir_.empty()) {
    return absl::FailedPreconditionError(
        "Init: this worker loads no model: it was started without --model_root (or --model)");
  }
  std::string real = path.empty() ? std::string() : RealPath(path);
  const bool under = !real.empty() && (real == dir_ || dir_ == "/" ||
                                       absl::StartsWith(real, absl::StrCat(dir_, "/")));
  if (!under || ::access(real.c_str(), R_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Init: model path '", path, "' is not a readable model under this worker's --model_root"));
  }
  return real;
}

}  // namespace tpserve::worker
