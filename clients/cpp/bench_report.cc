#include "clients/cpp/bench_report.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"

namespace tpserve::client {

double Percentile(std::vector<double>* values, double p) {
  if (values->empty()) return 0;
  std::sort(values->begin(), values->end());
  const double rank = p / 100.0 * static_cast<double>(values->size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values->size() - 1);
  return (*values)[lo] + (rank - static_cast<double>(lo)) * ((*values)[hi] - (*values)[lo]);
}

namespace {

nlohmann::json Stats(std::vector<double> v) {
  const double mean =
      v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return {{"p50", Percentile(&v, 50)},
          {"p90", Percentile(&v, 90)},
          {"p99", Percentile(&v, 99)},
          {"mean", mean},
          {"count", v.size()}};
}

}  // namespace

nlohmann::json Summarize(const std::vector<RequestRecord>& records, double duration_s,
                         const nlohmann::json& config) {
  std::vector<double> ttft, itl, e2e;
  std::map<std::string, int64_t> errors;
  int64_t ok = 0;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t resumes = 0;
  for (const RequestRecord& r : records) {
    output_tokens += r.output_tokens;
    resumes += r.resumes;
    if (!r.error.empty()) {
      ++errors[r.error];
      continue;
    }
    ++ok;
    prompt_tokens += r.prompt_tokens;
    e2e.push_back(r.end_s - r.start_s);
    if (!r.message_s.empty()) ttft.push_back(r.message_s.front() - r.start_s);
    for (size_t i = 1; i < r.message_s.size(); ++i) {
      itl.push_back(r.message_s[i] - r.message_s[i - 1]);
    }
  }
  const double d = duration_s > 0 ? duration_s : 1e-9;
  return {{"config", config},
          {"requests", records.size()},
          {"ok", ok},
          {"errors", errors},
          {"resumes", resumes},
          {"duration_s", duration_s},
          {"requests_per_s", static_cast<double>(ok) / d},
          {"prompt_tokens", prompt_tokens},
          {"output_tokens", output_tokens},
          {"output_tokens_per_s", static_cast<double>(output_tokens) / d},
          {"ttft_s", Stats(ttft)},
          {"itl_s", Stats(itl)},
          {"e2e_s", Stats(e2e)}};
}

std::string SummaryLine(const nlohmann::json& summary) {
  int64_t failed = 0;
  std::string by_code;
  for (const auto& [code, n] : summary["errors"].items()) {
    failed += n.get<int64_t>();
    absl::StrAppend(&by_code, by_code.empty() ? "" : ", ", code, ": ", n.get<int64_t>());
  }
  return absl::StrCat(summary["ok"].get<int64_t>(), "/", summary["requests"].get<int64_t>(),
                      " ok in ", summary["duration_s"].get<double>(), " s; ", failed, " errors",
                      by_code.empty() ? "" : absl::StrCat(" {", by_code, "}"), "; ",
                      summary["resumes"].get<int64_t>(), " resumes; ",
                      summary["output_tokens_per_s"].get<double>(), " output tokens/s; TTFT p50 ",
                      summary["ttft_s"]["p50"].get<double>(), " s; ITL p50 ",
                      summary["itl_s"]["p50"].get<double>(), " s");
}

}  // namespace tpserve::client
