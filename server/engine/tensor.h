// Tensor: a view of a row-major [rows, cols] matrix living in a Backend's memory. It does not
// own the memory (the Backend does); copying a Tensor copies the view. Plain data.
#ifndef TPSERVE_SERVER_ENGINE_TENSOR_H_
#define TPSERVE_SERVER_ENGINE_TENSOR_H_

#include <cstdint>

namespace tpserve::engine {

enum class DType { kF32, kF16, kBF16 };

inline int64_t DTypeBytes(DType t) { return t == DType::kF32 ? 4 : 2; }

struct Tensor {
  void* data = nullptr;  // device memory (host memory on the CPU backend)
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kF32;

  int64_t elements() const { return rows * cols; }
  int64_t bytes() const { return elements() * DTypeBytes(dtype); }
  // The first `n` rows (n <= rows): the live part of a workspace sized for the largest step.
  Tensor Rows(int64_t n) const { return {data, n, cols, dtype}; }
  // Reinterprets the same memory as [rows * cols / new_cols, new_cols].
  Tensor Reshape(int64_t new_cols) const { return {data, rows * cols / new_cols, new_cols, dtype}; }
};

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_TENSOR_H_
