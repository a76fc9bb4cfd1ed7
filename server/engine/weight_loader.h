// WeightLoader: reads one rank's slices of weight matrices from a WeightSource into a
// Backend. A matrix is kept in its file's blocks when the backend HoldsPacked() that type and
// the slice falls on block boundaries; where it cannot (a row-parallel split inside a block,
// or fused parts stored in different types) it is re-quantised to Q8_0 and the log says so;
// otherwise, and always in exact mode, it is dequantised to the backend's weight_dtype().
// Not thread-safe; lives for one load.
#ifndef TPSERVE_SERVER_ENGINE_WEIGHT_LOADER_H_
#define TPSERVE_SERVER_ENGINE_WEIGHT_LOADER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/engine/backend.h"
#include "server/model/plan/shard_plan.h"
#include "server/model/weights/weight_source.h"

namespace tpserve::engine {

// Rows `rows` x columns `cols` of the file tensor `name`.
struct WeightPart {
  std::string name;
  model::Range rows;
  model::Range cols;
};

class WeightLoader {
 public:
  // exact: dequantise everything to backend->weight_dtype() (the --dequantize mode).
  WeightLoader(const model::WeightSource* weights, Backend* backend, bool exact)
      : weights_(weights), backend_(backend), exact_(exact) {}

  // A [total_rows, cols] matrix: the parts stacked by rows (all of `cols` columns), then zero
  // rows up to total_rows.
  absl::StatusOr<Tensor> Matrix(absl::Span<const WeightPart> parts, int64_t total_rows,
                                int64_t cols);
  // A [1, n] f32 vector (norm weights), whatever the file stores.
  absl::StatusOr<Tensor> Vector(const std::string& name, int64_t n);

  // Matrices held per type, e.g. {"Q4_1": 210, "Q8_0": 1}, for the load log.
  std::string Summary() const;

 private:
  // floats_ = the parts stacked as f32 [total_rows, cols], zero rows below.
  absl::Status ReadFloats(absl::Span<const WeightPart> parts, int64_t total_rows, int64_t cols);
  void Count(DType dtype);

  const model::WeightSource* weights_;
  Backend* backend_;
  bool exact_;
  std::vector<uint8_t> host_;
  std::vector<float> floats_;
  std::vector<std::pair<DType, int>> counts_;
};

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_WEIGHT_LOADER_H_
