#include "kernels/cpu/quant/weight_layout.h"

#include <cstring>

namespace tpserve::kernels::cpu {

int64_t LayoutBytes(WeightFormat format, int64_t n, int64_t k) {
  const FormatKernels& f = FormatKernelsFor(format);
  if (f.interleaved8 == nullptr) return n * RowBytes(format, k);
  const int64_t tiles = (n + kInterleaved8Rows - 1) / kInterleaved8Rows;
  return tiles * kInterleaved8Rows * RowBytes(format, k);
}

void ToLayout(WeightFormat format, const uint8_t* rows, int64_t n, int64_t k, uint8_t* out) {
  const FormatKernels& f = FormatKernelsFor(format);
  if (f.interleaved8 == nullptr) {
    std::memcpy(out, rows, static_cast<size_t>(n * RowBytes(format, k)));
    return;
  }
  f.interleaved8->pack(rows, n, k, out);
}

void DequantizeLayoutRows(WeightFormat format, const uint8_t* w, int64_t k, int64_t r0, int64_t r1,
                          float* out) {
  const FormatKernels& f = FormatKernelsFor(format);
  for (int64_t r = r0; r < r1; ++r, out += k) {
    if (f.interleaved8 != nullptr) {
      f.interleaved8->dequantize_row(w, k, r, out);
    } else {
      f.dequantize(w + r * RowBytes(format, k), k / f.block_values, out);
    }
  }
}

}  // namespace tpserve::kernels::cpu
