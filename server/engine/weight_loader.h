// WeightLoader: reads one rank's slices of weight matrices from a WeightSource into a
// Backend. A matrix is kept in its file's blocks when the backend HoldsPacked() that type and
// the slice falls on block boundaries; where it cannot (a row-parallel split inside a block,
// or fused parts stored in different types) it is re-quantised to Q8_0 and the log says so;
// otherwise, and always in exact mode, it is dequantised to the backend's weight_dtype().
// A load can be abandoned: the loader polls a caller's `cancelled` before each tensor and
// each chunk of a large one, and stops with Cancelled once it says so.
// Not thread-safe; lives for one load.
#ifndef TPSERVE_SERVER_ENGINE_WEIGHT_LOADER_H_
#define TPSERVE_SERVER_ENGINE_WEIGHT_LOADER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
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
  // True: abandon the load (polled from the loading thread; any thread may make it true).
  using CancelFn = std::function<bool()>;
  // Rows of a tensor read between two polls of `cancelled`: at most this many bytes of them.
  static constexpr int64_t kChunkBytes = 8 << 20;

  // exact: dequantise everything to backend->weight_dtype() (the --dequantize mode).
  // cancelled: empty, or polled as above (Matrix and Vector then return Cancelled).
  WeightLoader(const model::WeightSource* weights, Backend* backend, bool exact,
               CancelFn cancelled = nullptr)
      : weights_(weights), backend_(backend), exact_(exact), cancelled_(std::move(cancelled)) {}

  // A [total_rows, cols] matrix: the parts stacked by rows (all of `cols` columns), then zero
  // rows up to total_rows.
  absl::StatusOr<Tensor> Matrix(absl::Span<const WeightPart> parts, int64_t total_rows,
                                int64_t cols);
  // A row-parallel [rows, cols] matrix for the canonical path's exact sums (Backend::
  // MatmulExact): kept in its file's blocks when the backend SumsExactly() that type and the
  // slice falls on its blocks, else re-quantised to Q8_0. The choice depends only on the stored
  // type and block-aligned slices, so every world holds the same values. FailedPrecondition when
  // cols is not a multiple of 32 or the backend sums no Q8_0 exactly.
  absl::StatusOr<Tensor> ExactSumsMatrix(const WeightPart& part, int64_t rows, int64_t cols);
  // A [1, n] f32 vector (norm weights), whatever the file stores.
  absl::StatusOr<Tensor> Vector(const std::string& name, int64_t n);

  // Matrices held per type, e.g. {"Q4_1": 210, "Q8_0": 1}, for the load log.
  std::string Summary() const;

 private:
  // The parts re-quantised to Q8_0 (their columns a multiple of 32), the log saying why.
  absl::StatusOr<Tensor> RequantizedQ8_0(absl::Span<const WeightPart> parts, int64_t total_rows,
                                         int64_t cols, const std::string& why);
  // floats_ = the parts stacked as f32 [total_rows, cols], zero rows below.
  absl::Status ReadFloats(absl::Span<const WeightPart> parts, int64_t total_rows, int64_t cols);
  // Calls read(begin, end) for consecutive row ranges covering part.rows, each of at most
  // kChunkBytes at `row_bytes` a row, polling for cancellation before each.
  absl::Status ReadInChunks(const WeightPart& part, int64_t row_bytes,
                            const std::function<absl::Status(int64_t, int64_t)>& read);
  // Cancelled (naming the tensors loaded so far and the one `reading`) once `cancelled_` says
  // so; else OK.
  absl::Status CheckCancelled(const std::string& reading) const;
  // A matrix of `dtype` is loaded.
  void Count(DType dtype);

  const model::WeightSource* weights_;
  Backend* backend_;
  bool exact_;
  CancelFn cancelled_;
  int tensors_ = 0;  // tensors loaded so far (matrices and vectors)
  std::vector<uint8_t> host_;
  std::vector<float> floats_;
  std::vector<std::pair<DType, int>> counts_;
};

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_WEIGHT_LOADER_H_
