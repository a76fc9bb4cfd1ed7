#include "kernels/cpu/matmul.h"

#include <immintrin.h>

#include <algorithm>

#include "glog/logging.h"
#include "kernels/cpu/vec_math.h"

namespace tpserve::kernels::cpu {
namespace {

// Columns per unit of the thread partition (a multiple of every tile width below).
constexpr int64_t kColumnUnit = 24;
// Target bytes of weights per column block, kept in L2 while all row tiles of x sweep over it.
constexpr int64_t kColumnBlockBytes = 256 * 1024;

// One MR x NR tile: y[i, j] = dot(x[i, :], w[j, :]) for i < MR, j < NR.
//   x: [MR, k] with row stride k; w: [NR, k] with row stride k; y: [MR, NR] with row stride ldy.
// The per-element order (8-lane FMA chain over k, masked tail, HorizontalSum) is the same for
// every MR and NR, which is what makes the result independent of the tiling.
//
// With kPrefetch, `next` points at the weights the following tile will read ([NR, k], contiguous
// right after this tile's): each k-step prefetches as many bytes of it as it consumes here, so
// the DRAM stream runs one tile ahead (the rows are too short for the hardware prefetcher to
// ramp up on its own).
template <int MR, int NR, bool kPrefetch>
void Tile(const float* x, const float* w, float* y, int64_t ldy, int64_t k, const float* next) {
  __m256 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 8 <= k; p += 8) {
    if constexpr (kPrefetch) {
      const char* ahead = reinterpret_cast<const char*>(next + NR * p);
#pragma GCC unroll 8
      for (int l = 0; l < (NR + 1) / 2; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
    }
    __m256 wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_loadu_ps(w + j * k + p);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * k + p);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (p < k) {
    const __m256i mask = TailMask(k - p);
    __m256 wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_maskload_ps(w + j * k + p, mask);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_maskload_ps(x + i * k + p, mask);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = HorizontalSum(acc[i][j]);
  }
}

// Tile width used for a tile of mr rows: fewer rows leave registers for more columns
// (mr * nr accumulators + nr weight vectors <= 16 ymm registers, or loads folded into FMAs).
// A single row (decode, m = 1) is memory-bound and goes one weight row at a time: one linear
// DRAM stream that the hardware prefetcher follows at near the machine's read bandwidth
// (measured: ~1.6x the throughput of 8 interleaved row streams, which software prefetch does
// not recover); consecutive rows' FMA chains overlap out of order.
constexpr int TileWidth(int mr) { return mr == 4 ? 3 : mr == 3 ? 4 : mr == 2 ? 6 : 1; }

// Tiles of MR rows over columns [j0, j1). kPrefetch for the first row tile of a column block,
// the one that pulls the block's weights from DRAM (later row tiles find them in L2).
template <int MR, bool kPrefetch>
void TileRow(const float* x, const float* w, float* y, int64_t ldy, int64_t k, int64_t j0,
             int64_t j1) {
  constexpr int NR = TileWidth(MR);
  constexpr bool kUsePrefetch = kPrefetch && NR > 1;
  int64_t j = j0;
  for (; j + NR <= j1; j += NR) {
    Tile<MR, NR, kUsePrefetch>(x, w + j * k, y + j, ldy, k, w + (j + NR) * k);
  }
  // Column tail: narrower tiles, same per-element order.
  for (; j < j1; ++j) Tile<MR, 1, false>(x, w + j * k, y + j, ldy, k, nullptr);
}

template <bool kPrefetch>
void RowTail(int64_t rows, const float* x, const float* w, float* y, int64_t ldy, int64_t k,
             int64_t j0, int64_t j1) {
  switch (rows) {
    case 3:
      TileRow<3, kPrefetch>(x, w, y, ldy, k, j0, j1);
      break;
    case 2:
      TileRow<2, kPrefetch>(x, w, y, ldy, k, j0, j1);
      break;
    case 1:
      TileRow<1, kPrefetch>(x, w, y, ldy, k, j0, j1);
      break;
    default:
      break;
  }
}

// Columns [j0, j1) of y, all m rows.
void MatmulColumns(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k,
                   int64_t j0, int64_t j1) {
  const int64_t row_bytes = std::max<int64_t>(k, 1) * static_cast<int64_t>(sizeof(float));
  const int64_t block =
      std::max<int64_t>(kColumnUnit, kColumnBlockBytes / row_bytes / kColumnUnit * kColumnUnit);
  for (int64_t jb = j0; jb < j1; jb += block) {
    const int64_t je = std::min(j1, jb + block);
    if (m < 4) {
      RowTail<true>(m, x, w, y, n, k, jb, je);
      continue;
    }
    TileRow<4, true>(x, w, y, n, k, jb, je);
    int64_t i = 4;
    for (; i + 4 <= m; i += 4) {
      TileRow<4, false>(x + i * k, w, y + i * n, n, k, jb, je);
    }
    RowTail<false>(m - i, x + i * k, w, y + i * n, n, k, jb, je);
  }
}

}  // namespace

void MatmulF32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k,
               ThreadPool* pool) {
  CHECK_GE(m, 0);
  CHECK_GE(n, 0);
  CHECK_GE(k, 0);
  if (m == 0 || n == 0) return;
  const int64_t units = (n + kColumnUnit - 1) / kColumnUnit;
  auto run = [&](int64_t begin, int64_t end) {
    MatmulColumns(x, w, y, m, n, k, begin * kColumnUnit, std::min(n, end * kColumnUnit));
  };
  if (pool == nullptr) {
    run(0, units);
  } else {
    pool->ParallelFor(units, run);
  }
}

}  // namespace tpserve::kernels::cpu
