#include "server/common/flags/flag_names.h"

#include <cstring>

namespace tpserve {

void UnderscoreFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strncmp(argv[i], "--", 2) != 0) continue;
    for (char* c = argv[i] + 2; *c != '\0' && *c != '='; ++c) {
      if (*c == '-') *c = '_';
    }
  }
}

}  // namespace tpserve
