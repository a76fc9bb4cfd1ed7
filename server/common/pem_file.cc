#include "server/common/pem_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<std::string> ReadPemFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  return text.str();
}

}  // namespace tpserve
