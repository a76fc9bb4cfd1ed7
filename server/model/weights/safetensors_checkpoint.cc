#include "server/model/weights/safetensors_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"

namespace tpserve::model {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Small text files only: config.json and index files are kilobytes to a few megabytes.
constexpr uintmax_t kMaxTextFileBytes = 64u << 20;

}  // namespace

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", ec.message()));
  if (size > kMaxTextFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is too large (", size, " bytes)"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("error reading ", path));
  return ss.str();
}

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& dir) {
  auto ckpt = std::unique_ptr<SafetensorsCheckpoint>(new SafetensorsCheckpoint());
  ckpt->dir_ = dir;
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, " is not a directory"));
  }
  ASSIGN_OR_RETURN(ckpt->config_json_, ReadTextFile((root / "config.json").string()));

  // shard file name -> tensor names the index places there, in first-seen order.
  std::vector<std::pair<std::string, std::vector<std::string>>> plan;
  const fs::path index_path = root / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    ASSIGN_OR_RETURN(const std::string text, ReadTextFile(index_path.string()));
    const json index = json::parse(text, nullptr, false);
    if (index.is_discarded() || !index.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), " is not valid JSON"));
    }
    const auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), " has no weight_map object"));
    }
    std::map<std::string, size_t> slot;
    for (const auto& [tensor, shard] : wm->items()) {
      if (!shard.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": weight_map entry \"",
                                                       tensor, "\" is not a file name"));
      }
      const std::string file = shard.get<std::string>();
      // Shards live beside the index: no paths, no escaping the directory.
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": shard name \"", file,
                                                       "\" is not a plain file name"));
      }
      auto [it, fresh] = slot.try_emplace(file, plan.size());
      if (fresh) plan.emplace_back(file, std::vector<std::string>());
      plan[it->second].second.push_back(tensor);
    }
    if (plan.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": empty weight_map"));
    }
  } else {
    plan.emplace_back("model.safetensors", std::vector<std::string>());
  }

  for (auto& [file, names] : plan) {
    const fs::path shard_path = root / file;
    if (!fs::exists(shard_path, ec)) {
      return absl::NotFoundError(absl::StrCat("shard ", file, " is missing from ", dir));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> shard,
                     SafetensorsFile::Open(shard_path.string()));
    const SafetensorsFile* f = shard.get();
    if (names.empty()) {  // unsharded: everything in the file
      for (const SafetensorsTensorInfo& t : f->tensors()) names.push_back(t.name);
    }
    for (const std::string& name : names) {
      const SafetensorsTensorInfo* info = f->Find(name);
      if (info == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor \"", name, "\" is not in shard ", file, " as the index says"));
      }
      ckpt->entries_[name] = Entry{f, info};
    }
    ckpt->shards_.push_back(std::move(shard));
  }
  return ckpt;
}

const SafetensorsCheckpoint::Entry* SafetensorsCheckpoint::Find(std::string_view name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsCheckpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace tpserve::model
