// File: server/common/flags/flag_names.h
//
// One spelling rule for the command lines of every binary (tpserve, tpserve-cli,
// tpserve-bench): absl flags are named with underscores, and a dashed name means the same flag
// (--max-tokens is --max_tokens, the form vLLM and most CLIs use). Stateless; called from main
// before absl::ParseCommandLine.
#ifndef TPSERVE_SERVER_COMMON_FLAGS_FLAG_NAMES_H_
#define TPSERVE_SERVER_COMMON_FLAGS_FLAG_NAMES_H_

namespace tpserve {

// Rewrites in place the name of every argument argv[1, argc) that starts with "--": each dash
// of the name (up to an '=') becomes an underscore; what follows the '=' is left alone. Stops
// at a bare "--" (the end of the flags); single-dash arguments and positional ones are left
// alone.
void UnderscoreFlagNames(int argc, char** argv);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_FLAGS_FLAG_NAMES_H_
