// File: kernels/cpu/quant/formats.h
//
// Weight formats the CPU kernels compute on, kept in their file's blocks (ggml's layouts,
// ggml-common.h): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K. One file per
// format
// (<format>.cc) defines its FormatKernels: how to dequantise its blocks and the dot-product tile
// that quant_matmul.h drives. FormatKernelsFor() is the table keyed by format.
//
// A weight matrix [n, k] of a format is n rows of k / block_values blocks each, row-major,
// RowBytes(format, k) bytes per row: exactly the bytes of a GGUF tensor (or a row range of it).
// The kernels read it in that layout, except a format with an Interleaved8 (Q8_0), whose rows
// are packed 8 at a time at load (weight_layout.h converts).
//
// Tiles. Integer formats take x quantised per row to Q8 blocks (q8_activations.h); float
// formats take x as f32. A tile computes y[i, j] = dot(x row i, w row j) over a few rows of x
// and of w. Batch invariance: each y[i, j] goes through the same sequence of float operations
// whatever the tile, the thread split, the instruction set or the rest of the batch (tile32.h
// and block_dot_k.h say which), so row i of an m-row product equals an m = 1 product of that
// row, bit for bit.
//
// Stateless; thread-safe.
#ifndef TPSERVE_KERNELS_CPU_QUANT_FORMATS_H_
#define TPSERVE_KERNELS_CPU_QUANT_FORMATS_H_

#include <cstdint>
#include <cstring>

#include "kernels/cpu/quant/half.h"
#include "kernels/cpu/quant/q8_activations.h"

namespace tpserve::kernels::cpu {

enum class WeightFormat : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ5_0,
  kQ5_1,
};

// Converts n_blocks consecutive blocks at src into n_blocks * block_values floats at dst,
// exactly as ggml's reference dequantisation rounds. No checks.
using DequantizeFn = void (*)(const uint8_t* src, int64_t n_blocks, float* dst);

// The instruction sets the integer tiles are built for, best last.
enum class QuantIsa : uint8_t { kAvx2 = 0, kAvx512Vnni = 1 };
inline constexpr int kQuantIsaCount = 2;

// Tiles of the formats with 32-value blocks (tile32.h), per instruction set:
//   rows8: y[(8g + r) * ldy + j] = dot(x row 8g + r, w row j), g < groups, r < 8,
//          j < nr (<= kRows8Width); x: groups x kb blocks of 8 interleaved rows;
//   cols8: y[j] = dot(x, w row j), j < nr (<= 8); x: one row of kb blocks;
//   colsn: y[i * ldy + j] = dot(x row i, w row j), 2 <= mr <= kColsRows, j < nr (<= 8);
//          x: mr rows of kb blocks, `x_stride` blocks apart; the same values as cols8's.
//   w: nr rows of `w_stride` bytes.
// Each comes with y f32 (the float chain of tile32.h's Numerics) and with y int64 (exact
// fixed-point sums of granules of `granule` blocks: block_sums.h's FixedBlocks, for
// QuantMatmulFixed; the float tiles ignore it).
template <class Out>
using Rows8TileFn = void (*)(const uint8_t* w, int64_t w_stride, int nr, const Q8Block8* x,
                             int64_t groups, int64_t kb, Out* y, int64_t ldy, int64_t granule);
template <class Out>
using Cols8TileFn = void (*)(const uint8_t* w, int64_t w_stride, int nr, const Q8Block* x,
                             int64_t kb, Out* y, int64_t granule);
inline constexpr int kColsRows = 7;  // the rows a whole group of 8 can leave
template <class Out>
using ColsNTileFn = void (*)(const uint8_t* w, int64_t w_stride, int nr, const Q8Block* x,
                             int64_t x_stride, int mr, int64_t kb, Out* y, int64_t ldy,
                             int64_t granule);
template <class Out>
struct Tiles32Fns {
  Rows8TileFn<Out> rows8;
  Cols8TileFn<Out> cols8;
  ColsNTileFn<Out> colsn;
};
struct Tiles32 {
  struct Isa {
    Tiles32Fns<float> floats;
    Tiles32Fns<int64_t> fixed;
  };
  Isa isa[kQuantIsaCount];  // indexed by QuantIsa
};

// The K-quants' tile (block_dot_k.h): y[i * ldy + j] = dot(x row i, w row j), i < mr, j < nr.
//   w: nr rows of `w_stride` bytes (k / block_values blocks each);
//   x: mr rows of Q8Blocks, `x_stride` blocks apart, k / 32 blocks each.
using QuantTileFn = void (*)(const uint8_t* w, int64_t w_stride, int nr, const Q8Block* x,
                             int64_t x_stride, int mr, int64_t k, float* y, int64_t ldy);
// The same for float formats, x: mr rows of k f32 values, `x_stride` floats apart.
using FloatTileFn = void (*)(const uint8_t* w, int64_t w_stride, int nr, const float* x,
                             int64_t x_stride, int mr, int64_t k, float* y, int64_t ldy);

// Formats whose tiles read their rows interleaved 8 at a time (interleaved8.h), in a layout
// made at load: QuantMatmul takes w of such a format in that layout (weight_layout.h converts
// the file's rows into it and reads rows back out).
//   pack:           rows [n, k] in the file's layout -> ceil(n / 8) tiles of 8 rows (rows past
//                   n zero), 8 * RowBytes(format, k) bytes each;
//   dequantize_row: row r of a packed [*, k] -> k floats, as `dequantize` does the file's row;
//   tile:           y[i * ldy + j] = dot(x row i, w row j) for i < mr (<= max_rows),
//                   j < nr (<= 8 * tiles, tiles <= max_tiles); w: `tiles` consecutive tiles of
//                   tile_bytes; x: mr rows of kb Q8Blocks, x_stride blocks apart; sums: each of
//                   x's blocks' sum of quants, laid out as x.
using PackRowsFn = void (*)(const uint8_t* rows, int64_t n, int64_t k, uint8_t* packed);
using DequantizePackedRowFn = void (*)(const uint8_t* packed, int64_t k, int64_t row, float* out);
//                   The tile comes with y f32 and with y int64 (fixed), as Tiles32's.
template <class Out>
using Interleaved8TileFn = void (*)(const uint8_t* w, int64_t tile_bytes, int tiles,
                                    const Q8Block* x, const int32_t* sums, int64_t x_stride, int mr,
                                    int64_t kb, Out* y, int64_t ldy, int nr, int64_t granule);
struct Interleaved8 {
  PackRowsFn pack;
  DequantizePackedRowFn dequantize_row;
  struct Isa {
    Interleaved8TileFn<float> tile;
    Interleaved8TileFn<int64_t> tile_fixed;
    int max_rows;
    int max_tiles;
  };
  Isa isa[kQuantIsaCount];  // indexed by QuantIsa
};
// Rows per interleaved tile.
inline constexpr int64_t kInterleaved8Rows = 8;

struct FormatKernels {
  WeightFormat format;
  const char* name;      // "Q4_1", ...
  int64_t block_values;  // 1 for F32/F16/BF16, 32 for Q*_0/Q*_1, 256 for K-quants
  int64_t block_bytes;
  DequantizeFn dequantize;
  const Tiles32* tiles32;            // Q4_0, Q4_1, Q5_0, Q5_1, else null
  QuantTileFn quant_tile;            // K-quants, else null
  FloatTileFn float_tile;            // float formats other than F32 (x as f32), else null
  const Interleaved8* interleaved8;  // Q8_0: its rows packed for its tiles, else null
};

// The kernels of `format` (never null for a value of the enum).
const FormatKernels& FormatKernelsFor(WeightFormat format);

// Bytes of one row of k values (k a multiple of the block size).
inline int64_t RowBytes(WeightFormat format, int64_t k) {
  const FormatKernels& f = FormatKernelsFor(format);
  return k / f.block_values * f.block_bytes;
}

// Quantises n_blocks * 32 floats to Q8_0 blocks as ggml's reference does (d = max|x| / 127
// stored as f16, q = round(x / d) from the f32 d): for weights whose split cannot keep their
// own blocks. Defined in q8_0.cc.
void QuantizeQ8_0(const float* src, int64_t n_blocks, uint8_t* dst);

// Per-format entries, defined in <format>.cc.
extern const FormatKernels kF32Kernels;
extern const FormatKernels kF16Kernels;
extern const FormatKernels kBF16Kernels;
extern const FormatKernels kQ8_0Kernels;
extern const FormatKernels kQ4_0Kernels;
extern const FormatKernels kQ4_1Kernels;
extern const FormatKernels kQ5_0Kernels;
extern const FormatKernels kQ5_1Kernels;
extern const FormatKernels kQ4_KKernels;
extern const FormatKernels kQ5_KKernels;
extern const FormatKernels kQ6_KKernels;

// An unaligned little-endian half at p, exactly (see half.h).
inline float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return F16ToF32(h);
}

// Sub-block j (0..7) scale and min of a Q4_K/Q5_K super-block from its 12 packed bytes
// (ggml's get_scale_min_k4): bytes 0..3 hold scales 0..3 in their low 6 bits, bytes 4..7
// mins 0..3; scales/mins 4..7 take their low 4 bits from bytes 8..11 and their top 2 bits
// from the top bits of bytes 0..3 / 4..7.
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_FORMATS_H_
