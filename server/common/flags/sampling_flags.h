// File: server/common/flags/sampling_flags.h
//
// The nine sampling flags, defined once for every binary that takes sampling parameters on its
// command line: `tpserve generate` runs with them, `tpserve-cli generate` and `chat` send them.
// Their defaults are the server's (greedy, no truncation, no penalties, seed 0, no logprobs);
// tpserve-cli sends only the flags given, so a request without them gets the server's
// per-request defaults instead (GenerateRequest in proto/tpserve/v1/generate.proto).
// Read with absl::GetFlag after absl::ParseCommandLine; thread-safe as absl flags are.
#ifndef TPSERVE_SERVER_COMMON_FLAGS_SAMPLING_FLAGS_H_
#define TPSERVE_SERVER_COMMON_FLAGS_SAMPLING_FLAGS_H_

#include <cstdint>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(float, temperature);
ABSL_DECLARE_FLAG(int32_t, top_k);
ABSL_DECLARE_FLAG(float, top_p);
ABSL_DECLARE_FLAG(float, min_p);
ABSL_DECLARE_FLAG(float, repetition_penalty);
ABSL_DECLARE_FLAG(float, frequency_penalty);
ABSL_DECLARE_FLAG(float, presence_penalty);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(uint32_t, logprobs);

#endif  // TPSERVE_SERVER_COMMON_FLAGS_SAMPLING_FLAGS_H_
