#include "server/coordinator/step_trace.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpserve::coordinator {
namespace {

std::string Micros(int64_t ns) { return absl::StrFormat("%.1f", static_cast<double>(ns) / 1e3); }

}  // namespace

absl::Duration StepOverhead(const StepOutcome& outcome) {
  uint64_t slowest = 0;
  for (size_t r = 0; r < outcome.compute_ns.size() && r < outcome.comm_ns.size(); ++r) {
    slowest = std::max(slowest, outcome.compute_ns[r] + outcome.comm_ns[r]);
  }
  return std::max(absl::ZeroDuration(),
                  outcome.wall - absl::Nanoseconds(static_cast<int64_t>(slowest)));
}

absl::StatusOr<std::unique_ptr<StepTrace>> StepTrace::Open(const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) {
    return absl::FailedPreconditionError(
        absl::StrCat("--step_trace_file: cannot write '", path, "'"));
  }
  return std::unique_ptr<StepTrace>(new StepTrace(std::move(out)));
}

void StepTrace::Record(uint64_t step_id, int64_t sequences, int64_t tokens,
                       const StepOutcome& outcome) {
  const auto ns = [](absl::Duration d) { return absl::ToInt64Nanoseconds(d); };
  std::string line = absl::StrCat("{\"step\":", step_id, ",\"sequences\":", sequences,
                                  ",\"tokens\":", tokens, ",\"wall_us\":", Micros(ns(outcome.wall)),
                                  ",\"overhead_us\":", Micros(ns(StepOverhead(outcome))));
  // One array of microseconds per rank.
  const auto array = [&](const char* name, auto value) {
    absl::StrAppend(&line, ",\"", name, "\":[");
    for (size_t r = 0; r < outcome.times.size(); ++r) {
      absl::StrAppend(&line, r > 0 ? "," : "", Micros(value(r)));
    }
    line += "]";
  };
  array("compute_us", [&](size_t r) { return static_cast<int64_t>(outcome.compute_ns[r]); });
  array("comm_us", [&](size_t r) { return static_cast<int64_t>(outcome.comm_ns[r]); });
  // Step write → worker reader; reader → executor; result ready → coordinator reader.
  array("dispatch_us", [&](size_t r) { return outcome.times[r].received - outcome.times[r].sent; });
  array("queue_us", [&](size_t r) { return outcome.times[r].started - outcome.times[r].received; });
  array("return_us",
        [&](size_t r) { return outcome.times[r].returned - outcome.times[r].finished; });
  line += "}\n";
  out_ << line;
}

}  // namespace tpserve::coordinator
