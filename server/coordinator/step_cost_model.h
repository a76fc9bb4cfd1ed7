// StepCostModel: what a world's step costs as a function of its tokens, learned from the
// steps' wall times, for speculative decoding's choice of how much to propose. On a CPU a
// step's cost is far from linear in its tokens: the first token streams every weight, the
// next few ride along nearly free (a verification of 5 positions costs about 1.4 plain steps
// here), and past about 8 the matmuls are compute-bound and each token costs its full share.
// So one line fitted to every step (decode batches, verifications, prefill chunks) gives
// the wrong marginal cost at both ends. Here the steps are kept in buckets of their token
// count (one per count up to 16, then a quarter of an octave each), each an exponentially
// weighted mean of (tokens, seconds); the cost at n tokens interpolates linearly between the
// nearest buckets below and above, but across a gap of more than 8 tokens no more steeply
// than the segment below it (sizes not yet seen are taken to cost what the last ones below
// did: optimistic, so that they get tried and learned), extrapolating from the last two
// past the ends; the cost of k more positions is the difference. Until two buckets hold
// steps, nothing is known (Known() is false). Owned by the engine thread; not thread-safe.
#ifndef TPSERVE_SERVER_COORDINATOR_STEP_COST_MODEL_H_
#define TPSERVE_SERVER_COORDINATOR_STEP_COST_MODEL_H_

#include <array>
#include <cstdint>

#include "absl/time/time.h"

namespace tpserve::coordinator {

class StepCostModel {
 public:
  // A step of `tokens` positions took `wall`.
  void Observe(int64_t tokens, absl::Duration wall);
  // Whether steps of at least two sizes have been seen.
  bool Known() const;
  // Seconds for a step of `tokens` positions (0 while nothing is known).
  double Seconds(double tokens) const;
  // Seconds that `extra` positions add to a step of `tokens` (>= 0; 0 while nothing is known).
  double Added(double tokens, double extra) const;

 private:
  static constexpr int kBuckets = 64;
  struct Bucket {
    double weight = 0;   // exponentially weighted count
    double tokens = 0;   // weighted sum of the steps' tokens
    double seconds = 0;  // weighted sum of their seconds
    double n() const { return tokens / weight; }
    double t() const { return seconds / weight; }
  };
  static int BucketOf(int64_t tokens);

  std::array<Bucket, kBuckets> buckets_{};
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_STEP_COST_MODEL_H_
