// File: server/worker/model_root.h
//
// ModelRoot: the one directory a worker loads models from (--model_root). The model path an
// Init names is resolved (realpath: `..` and every symlink followed) and loads only when the
// result lies under the root's own real path and is readable. Every refusal of a path has
// the same message, whether it is outside the root, missing, unreadable or a dangling link,
// so a peer learns nothing of the filesystem outside the root. A default-constructed
// ModelRoot has no directory and refuses every path. Immutable; thread-safe.
#ifndef TPSERVE_SERVER_WORKER_MODEL_ROOT_H_
#define TPSERVE_SERVER_WORKER_MODEL_ROOT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpserve::worker {

class ModelRoot {
 public:
  ModelRoot() = default;  // no directory: every path refused

  // The root `dir` (resolved now). InvalidArgument naming --model_root when it is not an
  // existing directory.
  static absl::StatusOr<ModelRoot> Open(const std::string& dir);

  // The default root for a worker started with --model `model_path` (its real path): that
  // directory when it is one (a Hugging Face model), else the directory holding the file (a
  // GGUF file).
  static std::string DefaultFor(const std::string& model_path);

  // The real path of `path` when it is readable and under the root; FailedPrecondition with
  // the same message for every refusal otherwise.
  absl::StatusOr<std::string> Resolve(const std::string& path) const;

  // The root's real path; empty when there is none.
  const std::string& dir() const { return dir_; }

 private:
  explicit ModelRoot(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace tpserve::worker

#endif  // TPSERVE_SERVER_WORKER_MODEL_ROOT_H_
