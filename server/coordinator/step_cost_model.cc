#include "server/coordinator/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tpserve::coordinator {
namespace {

// Each step's weight in its bucket against the ones before it.
constexpr double kDecay = 0.95;
// Two seen sizes further apart than this leave sizes between them unseen.
constexpr double kWideGap = 8;

}  // namespace

int StepCostModel::BucketOf(int64_t tokens) {
  if (tokens <= 16) return static_cast<int>(std::max<int64_t>(1, tokens)) - 1;
  const int quarter = static_cast<int>(4.0 * std::log2(static_cast<double>(tokens) / 16.0));
  return std::min(kBuckets - 1, 16 + quarter);
}

void StepCostModel::Observe(int64_t tokens, absl::Duration wall) {
  if (tokens <= 0) return;
  Bucket& b = buckets_[BucketOf(tokens)];
  b.weight = b.weight * kDecay + 1;
  b.tokens = b.tokens * kDecay + static_cast<double>(tokens);
  b.seconds = b.seconds * kDecay + absl::ToDoubleSeconds(wall);
}

bool StepCostModel::Known() const {
  int seen = 0;
  for (const Bucket& b : buckets_) seen += b.weight > 0 ? 1 : 0;
  return seen >= 2;
}

double StepCostModel::Seconds(double tokens) const {
  // The seen buckets' (tokens, seconds) in order, the seconds made non-decreasing (a larger
  // step never costs less; a noisy bucket would otherwise make positions look free).
  struct Point {
    double n, t;
  };
  std::vector<Point> points;
  for (const Bucket& b : buckets_) {
    if (b.weight <= 0) continue;
    points.push_back({b.n(), std::max(b.t(), points.empty() ? 0.0 : points.back().t)});
  }
  if (points.size() < 2) return points.empty() ? 0.0 : points.front().t;
  // The segment holding `tokens`, or the first or last one extended past the ends.
  size_t hi = 1;
  while (hi + 1 < points.size() && points[hi].n < tokens) ++hi;
  auto slope = [&](size_t i) {  // of the segment ending at point i
    const Point& a = points[i - 1];
    const Point& b = points[i];
    return b.n > a.n ? (b.t - a.t) / (b.n - a.n) : 0.0;
  };
  // Inside a wide segment, no steeper than the one before it: sizes not seen yet (the few
  // positions past a decode batch, between it and the prefill chunks) are taken to cost what
  // the last sizes below them did, until steps of those sizes are seen. Optimistic, so that
  // speculation tries them and the model learns them.
  const Point& a = points[hi - 1];
  double s = slope(hi);
  if (hi >= 2 && tokens < points[hi].n && points[hi].n - a.n > kWideGap) {
    s = std::min(s, slope(hi - 1));
  }
  return std::max(0.0, a.t + s * (tokens - a.n));
}

double StepCostModel::Added(double tokens, double extra) const {
  return std::max(0.0, Seconds(tokens + extra) - Seconds(tokens));
}

}  // namespace tpserve::coordinator
