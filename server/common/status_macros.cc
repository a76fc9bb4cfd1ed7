// The status macros are header-only; this unit keeps the library non-empty and checks the
// header compiles on its own.
#include "server/common/status_macros.h"
