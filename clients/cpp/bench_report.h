// BenchReport: what tpserve-bench measured — one record per request (timings of every
// streamed message, tokens, status) — and its summary: requests/s, output tokens/s,
// time-to-first-token, inter-token and end-to-end latency percentiles, errors by code, the
// resends of broken streams, as JSON and as one line of text. Not thread-safe: records are added
// under the runner's lock.
#ifndef TPSERVE_CLIENTS_CPP_BENCH_REPORT_H_
#define TPSERVE_CLIENTS_CPP_BENCH_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace tpserve::client {

struct RequestRecord {
  double start_s = 0;  // since the run began
  double end_s = 0;
  std::vector<double> message_s;  // arrival of each streamed message with tokens
  int64_t prompt_tokens = 0;      // from the final usage
  int64_t output_tokens = 0;      // token ids received
  std::string error;              // gRPC code name; empty when OK
  int64_t resumes = 0;            // resends after the stream broke (GenerationClient)
};

// Linear-interpolated percentile (p in [0, 100]) of `values` (sorted in place); 0 if empty.
double Percentile(std::vector<double>* values, double p);

// The summary: {"requests", "ok", "errors": {code: n}, "resumes" (over every request, failed
// ones too), "duration_s", "requests_per_s",
// "output_tokens", "output_tokens_per_s", "ttft_s"|"itl_s"|"e2e_s": {"p50","p90","p99","mean"}}
// plus `config` as given.
nlohmann::json Summarize(const std::vector<RequestRecord>& records, double duration_s,
                         const nlohmann::json& config);

// The summary in one line: "OK/REQUESTS ok in D s; E errors {code: n}; R resumes; T output
// tokens/s; TTFT p50 S s; ITL p50 S s".
std::string SummaryLine(const nlohmann::json& summary);

}  // namespace tpserve::client

#endif  // TPSERVE_CLIENTS_CPP_BENCH_REPORT_H_
