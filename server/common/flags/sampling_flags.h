// File: server/common/flags/sampling_flags.h
//
// The nine sampling flags, --logprobs and the two stop flags, defined once for every binary
// that takes them on its command line, and turned into GenerateRequest fields in one place
// (SamplingFlagsToRequest): `tpserve generate` runs with them, `tpserve-cli generate` and
// `chat` send them. A new sampling field is a flag here and a line there.
// Their defaults are greedy, no truncation, no penalties, seed 0, no logprobs; `tpserve
// generate` runs with every one (greedy unless told otherwise), tpserve-cli sends only the
// flags given, so a request without them gets the server's per-request defaults instead
// (GenerateRequest in proto/tpserve/v1/generate.proto: temperature 1, a drawn seed).
// Read with absl::GetFlag after absl::ParseCommandLine; thread-safe as absl flags are.
#ifndef TPSERVE_SERVER_COMMON_FLAGS_SAMPLING_FLAGS_H_
#define TPSERVE_SERVER_COMMON_FLAGS_SAMPLING_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tpserve/v1/generate.pb.h"

ABSL_DECLARE_FLAG(float, temperature);
ABSL_DECLARE_FLAG(int32_t, top_k);
ABSL_DECLARE_FLAG(float, top_p);
ABSL_DECLARE_FLAG(float, min_p);
ABSL_DECLARE_FLAG(float, typical_p);
ABSL_DECLARE_FLAG(float, repetition_penalty);
ABSL_DECLARE_FLAG(float, frequency_penalty);
ABSL_DECLARE_FLAG(float, presence_penalty);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(uint32_t, logprobs);
// Stop conditions, as GenerateRequest's stop and stop_token_ids: comma-separated lists, and a
// flag given several times adds up its lists (read them with ReadStopFlags).
ABSL_DECLARE_FLAG(std::vector<std::string>, stop);
ABSL_DECLARE_FLAG(std::vector<std::string>, stop_token_ids);

namespace tpserve {

struct StopFlags {
  std::vector<std::string> stop;        // stop strings
  std::vector<int32_t> stop_token_ids;  // token ids that end the generation
};

// The stop flags of the command line argv[1, argc) (names already underscored): every
// occurrence of --stop and --stop_token_ids (--stop=A,B or --stop A,B), in order; absl's
// values when the command line names neither (a --flagfile). InvalidArgument naming the flag
// for a stop token id that is not an integer.
absl::StatusOr<StopFlags> ReadStopFlags(int argc, char** argv);

// Which sampling flags SamplingFlagsToRequest sets: every one (their values, defaults
// included), or only those named on the command line.
enum class SamplingFlagSet { kAll, kGiven };

// The sampling flags (as `set` says), --logprobs and the stop flags (ReadStopFlags) of the
// command line argv[1, argc) into `request`'s fields of the same names. InvalidArgument as
// ReadStopFlags.
absl::Status SamplingFlagsToRequest(int argc, char** argv, SamplingFlagSet set,
                                    tpserve::v1::GenerateRequest* request);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_FLAGS_SAMPLING_FLAGS_H_
