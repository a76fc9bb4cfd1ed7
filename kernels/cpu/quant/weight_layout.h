// File: kernels/cpu/quant/weight_layout.h
//
// The layout QuantMatmul reads a weight matrix w [n, k] of a format in: the file's rows as they
// are (RowBytes(format, k) bytes each), or, for a format with an interleaved layout (Q8_0;
// formats.h, interleaved8.h), its rows packed 8 at a time for its tiles, made once at load.
// Either way the bytes are the file's, reordered: the layout takes 8 * RowBytes per 8 rows
// (the last tile padded with zero rows), never a float copy. Stateless; thread-safe.
#ifndef TPSERVE_KERNELS_CPU_QUANT_WEIGHT_LAYOUT_H_
#define TPSERVE_KERNELS_CPU_QUANT_WEIGHT_LAYOUT_H_

#include <cstdint>

#include "kernels/cpu/quant/formats.h"

namespace tpserve::kernels::cpu {

// Bytes of w [n, k] of `format` in its kernel layout (k a multiple of the block size).
int64_t LayoutBytes(WeightFormat format, int64_t n, int64_t k);

// rows: [n, k] in the file's layout (n * RowBytes(format, k) bytes) -> out: LayoutBytes(format,
// n, k) bytes, the kernel layout. out must not alias rows.
void ToLayout(WeightFormat format, const uint8_t* rows, int64_t n, int64_t k, uint8_t* out);

// Rows [r0, r1) of w [*, k] in the kernel layout, dequantised into out: [r1 - r0, k] f32,
// exactly as the format's `dequantize` decodes the file's rows.
void DequantizeLayoutRows(WeightFormat format, const uint8_t* w, int64_t k, int64_t r0, int64_t r1,
                          float* out);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_WEIGHT_LAYOUT_H_
