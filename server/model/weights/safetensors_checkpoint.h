// SafetensorsCheckpoint: a Hugging Face model directory: config.json plus either one
// model.safetensors or shards listed by model.safetensors.index.json (weight_map: tensor
// name -> shard file). Every shard is opened once; a missing shard or a tensor the index
// places in a shard that lacks it is an error naming it. Immutable after Open; thread-safe.
#ifndef TPSERVE_SERVER_MODEL_WEIGHTS_SAFETENSORS_CHECKPOINT_H_
#define TPSERVE_SERVER_MODEL_WEIGHTS_SAFETENSORS_CHECKPOINT_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/model/weights/safetensors_file.h"

namespace tpserve::model {

class SafetensorsCheckpoint {
 public:
  // One tensor and the shard holding it.
  struct Entry {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensorInfo* info = nullptr;
  };

  // Opens the directory `dir`.
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // The text of config.json.
  const std::string& config_json() const { return config_json_; }
  // The tensor called `name`, or nullptr.
  const Entry* Find(std::string_view name) const;
  // Every tensor name, sorted.
  std::vector<std::string> Names() const;
  // The opened shards, in the order first named by the index (one file when unsharded).
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }

 private:
  SafetensorsCheckpoint() = default;

  std::string dir_;
  std::string config_json_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// Reads a whole small text file (config.json, an index) into a string; NotFound when absent.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_WEIGHTS_SAFETENSORS_CHECKPOINT_H_
