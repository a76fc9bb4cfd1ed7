// Tensor: a view of a row-major [rows, cols] matrix living in a Backend's memory. It does not
// own the memory (the Backend does); copying a Tensor copies the view. Plain data.
//
// Element types: f32, f16 and bf16, and weights kept in the blocks of their file's format
// (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K; see kernels/cpu/quant/formats.h): a row of `cols`
// values is cols / block_values blocks, RowBytes(dtype, cols) bytes. And int64, for the exact
// fixed-point sums of row-parallel products (kernels/cpu/quant/fixed_sum.h); never a weight.
#ifndef TPSERVE_SERVER_ENGINE_TENSOR_H_
#define TPSERVE_SERVER_ENGINE_TENSOR_H_

#include <cstdint>

#include "kernels/cpu/quant/formats.h"

namespace tpserve::engine {

enum class DType {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kI64
};

// The kernels' format of the same layout.
inline kernels::cpu::WeightFormat FormatOf(DType t) {
  using kernels::cpu::WeightFormat;
  switch (t) {
    case DType::kF32:
      return WeightFormat::kF32;
    case DType::kF16:
      return WeightFormat::kF16;
    case DType::kBF16:
      return WeightFormat::kBF16;
    case DType::kQ8_0:
      return WeightFormat::kQ8_0;
    case DType::kQ4_0:
      return WeightFormat::kQ4_0;
    case DType::kQ4_1:
      return WeightFormat::kQ4_1;
    case DType::kQ5_0:
      return WeightFormat::kQ5_0;
    case DType::kQ5_1:
      return WeightFormat::kQ5_1;
    case DType::kQ4_K:
      return WeightFormat::kQ4_K;
    case DType::kQ5_K:
      return WeightFormat::kQ5_K;
    case DType::kQ6_K:
      return WeightFormat::kQ6_K;
    case DType::kI64:  // no weight format
      break;
  }
  return WeightFormat::kF32;
}

// The DType of a kernel format (the inverse of FormatOf).
inline DType DTypeOf(kernels::cpu::WeightFormat f) {
  using kernels::cpu::WeightFormat;
  switch (f) {
    case WeightFormat::kF32:
      return DType::kF32;
    case WeightFormat::kF16:
      return DType::kF16;
    case WeightFormat::kBF16:
      return DType::kBF16;
    case WeightFormat::kQ8_0:
      return DType::kQ8_0;
    case WeightFormat::kQ4_0:
      return DType::kQ4_0;
    case WeightFormat::kQ4_1:
      return DType::kQ4_1;
    case WeightFormat::kQ5_0:
      return DType::kQ5_0;
    case WeightFormat::kQ5_1:
      return DType::kQ5_1;
    case WeightFormat::kQ4_K:
      return DType::kQ4_K;
    case WeightFormat::kQ5_K:
      return DType::kQ5_K;
    case WeightFormat::kQ6_K:
      return DType::kQ6_K;
  }
  return DType::kF32;
}

// "F32", "Q4_1", ...
inline const char* DTypeName(DType t) {
  return t == DType::kI64 ? "I64" : kernels::cpu::FormatKernelsFor(FormatOf(t)).name;
}
// Values per block: 1 for f32 / f16 / bf16 / int64.
inline int64_t DTypeBlockValues(DType t) {
  return t == DType::kI64 ? 1 : kernels::cpu::FormatKernelsFor(FormatOf(t)).block_values;
}
// Bytes of one row of `cols` values (cols a multiple of DTypeBlockValues(t)).
inline int64_t DTypeRowBytes(DType t, int64_t cols) {
  return t == DType::kI64 ? 8 * cols : kernels::cpu::RowBytes(FormatOf(t), cols);
}
// Bytes of one value of an unblocked type (f32, f16, bf16, int64).
inline int64_t DTypeBytes(DType t) { return t == DType::kI64 ? 8 : t == DType::kF32 ? 4 : 2; }

struct Tensor {
  void* data = nullptr;  // device memory (host memory on the CPU backend)
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kF32;

  int64_t elements() const { return rows * cols; }
  int64_t bytes() const { return rows * DTypeRowBytes(dtype, cols); }
  // The first `n` rows (n <= rows): the live part of a workspace sized for the largest step.
  Tensor Rows(int64_t n) const { return {data, n, cols, dtype}; }
  // Reinterprets the same memory as [rows * cols / new_cols, new_cols] (unblocked types).
  Tensor Reshape(int64_t new_cols) const { return {data, rows * cols / new_cols, new_cols, dtype}; }
};

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_TENSOR_H_
