#include "server/common/flags/sampling_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(float, temperature, 0.0f, "sampling temperature (0: greedy)");
ABSL_FLAG(int32_t, top_k, 0, "keep the k most likely tokens (0: off)");
ABSL_FLAG(float, top_p, 1.0f, "nucleus sampling mass in (0, 1] (1: off)");
ABSL_FLAG(float, min_p, 0.0f, "drop tokens below min_p times the top one (0: off)");
ABSL_FLAG(float, repetition_penalty, 1.0f, "repetition penalty (1: off)");
ABSL_FLAG(float, frequency_penalty, 0.0f, "frequency penalty in [-2, 2]");
ABSL_FLAG(float, presence_penalty, 0.0f, "presence penalty in [-2, 2]");
ABSL_FLAG(uint64_t, seed, 0,
          "random seed: the same seed, the same tokens (tpserve-cli: unset, the server draws one)");
ABSL_FLAG(uint32_t, logprobs, 0, "report this many top alternatives per token (--json)");
