#include "kernels/cpu/quant/quant_matmul.h"

#include <cpuid.h>

#include <algorithm>
#include <type_traits>

#include "glog/logging.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant/fixed_sum.h"
#include "kernels/cpu/quant/tile32.h"

namespace tpserve::kernels::cpu {
namespace {

// Weight rows per unit of the thread partition.
constexpr int64_t kRowUnit = 8;
// Target bytes of weights per column block, kept in L2 while all row tiles of x sweep it.
constexpr int64_t kColumnBlockBytes = 128 * 1024;
// Rows quantised per unit when the quantisation is split across threads: one interleaved group.
constexpr int64_t kQuantRowUnit = 8;

// Tile width for a tile of mr rows of x (the K-quants' and float formats' tiles): a lone row
// (decode) takes 1 weight row at a time; taller tiles keep mr * nr accumulators and nr unpacked
// weight blocks in 16 registers.
int TileWidth(int64_t mr) { return mr == 1 ? 1 : 2; }

// Weight rows per column block of rows of row_bytes.
int64_t ColumnBlock(int64_t row_bytes) {
  return std::max<int64_t>(
      kRowUnit, kColumnBlockBytes / std::max<int64_t>(row_bytes, 1) / kRowUnit * kRowUnit);
}

// Columns [j0, j1) of y, all m rows, through `tile(w rows, nr, x rows, mr, y)`.
template <class TileCall>
void Columns(int64_t m, int64_t row_bytes, int64_t j0, int64_t j1, const TileCall& tile) {
  const int64_t block = ColumnBlock(row_bytes);
  for (int64_t jb = j0; jb < j1; jb += block) {
    const int64_t je = std::min(j1, jb + block);
    for (int64_t i = 0; i < m; i += 4) {
      const int mr = static_cast<int>(std::min<int64_t>(4, m - i));
      const int nr_max = TileWidth(mr);
      for (int64_t j = jb; j < je; j += nr_max) {
        tile(j, static_cast<int>(std::min<int64_t>(nr_max, je - j)), i, mr);
      }
    }
  }
}

template <class Fn>
void Run(int64_t units, ThreadPool* pool, const Fn& fn) {
  if (pool == nullptr) {
    fn(0, units);
  } else {
    pool->ParallelFor(units, fn);
  }
}

}  // namespace

const FormatKernels& FormatKernelsFor(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return kF32Kernels;
    case WeightFormat::kF16:
      return kF16Kernels;
    case WeightFormat::kBF16:
      return kBF16Kernels;
    case WeightFormat::kQ8_0:
      return kQ8_0Kernels;
    case WeightFormat::kQ4_0:
      return kQ4_0Kernels;
    case WeightFormat::kQ4_1:
      return kQ4_1Kernels;
    case WeightFormat::kQ5_0:
      return kQ5_0Kernels;
    case WeightFormat::kQ5_1:
      return kQ5_1Kernels;
    case WeightFormat::kQ4_K:
      return kQ4_KKernels;
    case WeightFormat::kQ5_K:
      return kQ5_KKernels;
    case WeightFormat::kQ6_K:
      return kQ6_KKernels;
  }
  LOG(FATAL) << "unknown weight format " << static_cast<int>(format);
}

QuantIsa BestQuantIsa() {
  static const QuantIsa isa = [] {
    __builtin_cpu_init();
    const bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
    return vnni ? QuantIsa::kAvx512Vnni : QuantIsa::kAvx2;
  }();
  return isa;
}

bool CpuSupportsQuantKernels() {
  static const bool supported = [] {
    __builtin_cpu_init();
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  return supported;
}

namespace {

// The activations x [m, k] as 8-bit blocks: scratch->rows [m, k / 32], and for the formats that
// take them, groups of 8 interleaved rows (scratch->groups, `groups` of them) or each block's
// sum of quants (scratch->sums, for interleaved8).
void QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t groups, bool with_sums,
                         ThreadPool* pool, QuantScratch* scratch) {
  const int64_t kb = k / 32;
  scratch->rows.resize(static_cast<size_t>(m * kb));
  scratch->groups.resize(static_cast<size_t>(groups * kb));
  scratch->sums.resize(static_cast<size_t>(with_sums ? m * kb : 0));
  Q8Block* xq = scratch->rows.data();
  Q8Block8* xg = scratch->groups.data();
  int32_t* sums = scratch->sums.data();
  auto quantize = [&](int64_t r0, int64_t r1) {
    QuantizeRowsQ8(x + r0 * k, r1 - r0, k, xq + r0 * kb);
    if (with_sums) SumQuants(xq + r0 * kb, (r1 - r0) * kb, sums + r0 * kb);
    for (int64_t g = (r0 + 7) / 8; g < std::min(groups, r1 / 8); ++g) {
      InterleaveRows8(xq + 8 * g * kb, kb, xg + g * kb);
    }
  };
  if (m >= 2 * kQuantRowUnit && pool != nullptr) {
    pool->ParallelFor((m + kQuantRowUnit - 1) / kQuantRowUnit, [&](int64_t begin, int64_t end) {
      quantize(begin * kQuantRowUnit, std::min(m, end * kQuantRowUnit));
    });
  } else {
    quantize(0, m);
  }
}

// Every block scale of the quantised activations times 2^32 (the fixed tiles' units,
// block_sums.h): exact, a power of two.
void ScaleToFixedUnits(QuantScratch* scratch) {
  const float one = static_cast<float>(kFixedOne);
  for (Q8Block& b : scratch->rows) {
    b.d *= one;
    b.ds *= one;
  }
  for (Q8Block8& g : scratch->groups) {
    for (int r = 0; r < 8; ++r) {
      g.d[r] *= one;
      g.ds[r] *= one;
    }
  }
}

// y [m, n] from Q8_0's interleaved tiles w: ceil(n / 8) tiles of 8 interleaved rows
// (weight_layout.h), one per unit of the thread partition. Each run of tiles is read from
// memory once and stays in L1 while every run of mr rows of x sweeps it; a lone row (decode)
// streams one tile at a time (measured faster than two: kernels_quant_matmul_bench, m = 1).
template <class Out>
void Interleaved8Matmul(const Interleaved8::Isa& tile, const QuantScratch& scratch,
                        const uint8_t* w, int64_t row_bytes, Out* y, int64_t m, int64_t n,
                        int64_t kb, int64_t granule, ThreadPool* pool) {
  const Q8Block* xq = scratch.rows.data();
  const int32_t* sums = scratch.sums.data();
  const int64_t tile_bytes = kInterleaved8Rows * row_bytes;
  const int run = m == 1 ? 1 : tile.max_tiles;
  static_assert(kRowUnit == kInterleaved8Rows);
  Run((n + kRowUnit - 1) / kRowUnit, pool, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; t += run) {
      const int tiles = static_cast<int>(std::min<int64_t>(run, end - t));
      const int nr = static_cast<int>(std::min<int64_t>(8 * tiles, n - 8 * t));
      for (int64_t i = 0; i < m; i += tile.max_rows) {
        const int mr = static_cast<int>(std::min<int64_t>(tile.max_rows, m - i));
        const auto fn = [&] {
          if constexpr (std::is_same_v<Out, float>) {
            return tile.tile;
          } else {
            return tile.tile_fixed;
          }
        }();
        fn(w + t * tile_bytes, tile_bytes, tiles, xq + i * kb, sums + i * kb, kb, mr, kb,
           y + i * n + 8 * t, n, nr, granule);
      }
    }
  });
}

// y [m, n] from the file's rows w through the 32-value integer tiles: groups of 8 rows of x
// through rows8, each tile of weight rows read once while every group sweeps it; the rows past
// the last whole group through colsn (cols8 for a lone row), each column block of weights read
// from memory once while those rows sweep it.
template <class Out>
void Tiles32Matmul(const Tiles32Fns<Out>& tiles, const QuantScratch& scratch, const uint8_t* w,
                   int64_t row_bytes, Out* y, int64_t m, int64_t n, int64_t kb, int64_t groups,
                   int64_t granule, ThreadPool* pool) {
  const Q8Block* xq = scratch.rows.data();
  const Q8Block8* xg = scratch.groups.data();
  const int64_t block = ColumnBlock(row_bytes);
  Run((n + kRowUnit - 1) / kRowUnit, pool, [&](int64_t begin, int64_t end) {
    const int64_t j0 = begin * kRowUnit, j1 = std::min(n, end * kRowUnit);
    if (groups > 0) {
      for (int64_t j = j0; j < j1; j += kRows8Width) {
        const int nr = static_cast<int>(std::min<int64_t>(kRows8Width, j1 - j));
        tiles.rows8(w + j * row_bytes, row_bytes, nr, xg, groups, kb, y + j, n, granule);
      }
    }
    if (8 * groups == m) return;
    for (int64_t jb = j0; jb < j1; jb += block) {
      const int64_t je = std::min(j1, jb + block);
      // The rows past the groups (at most kColsRows) together, each weight tile unpacked once
      // for them; a lone row through cols8.
      for (int64_t i = 8 * groups; i < m; i += kColsRows) {
        const int mr = static_cast<int>(std::min<int64_t>(kColsRows, m - i));
        for (int64_t j = jb; j < je; j += 8) {
          const int nr = static_cast<int>(std::min<int64_t>(8, je - j));
          if (mr == 1) {
            tiles.cols8(w + j * row_bytes, row_bytes, nr, xq + i * kb, kb, y + i * n + j, granule);
          } else {
            tiles.colsn(w + j * row_bytes, row_bytes, nr, xq + i * kb, kb, mr, kb, y + i * n + j, n,
                        granule);
          }
        }
      }
    }
  });
}

}  // namespace

void QuantMatmul(WeightFormat format, const float* x, const uint8_t* w, float* y, int64_t m,
                 int64_t n, int64_t k, ThreadPool* pool, QuantScratch* scratch, QuantIsa isa) {
  CHECK_GE(m, 0);
  CHECK_GE(n, 0);
  CHECK_GE(k, 0);
  if (m == 0 || n == 0) return;
  if (format == WeightFormat::kF32) {
    MatmulF32(x, reinterpret_cast<const float*>(w), y, m, n, k, pool);
    return;
  }
  const FormatKernels& f = FormatKernelsFor(format);
  CHECK_EQ(k % f.block_values, 0) << f.name << " rows of " << k << " values";
  const int64_t row_bytes = RowBytes(format, k);
  auto columns = [&](auto tile) {
    Run((n + kRowUnit - 1) / kRowUnit, pool, [&](int64_t begin, int64_t end) {
      Columns(m, row_bytes, begin * kRowUnit, std::min(n, end * kRowUnit), tile);
    });
  };
  if (f.float_tile != nullptr) {
    columns([&](int64_t j, int nr, int64_t i, int mr) {
      f.float_tile(w + j * row_bytes, row_bytes, nr, x + i * k, k, mr, k, y + i * n + j, n);
    });
    return;
  }
  CHECK_EQ(k % 32, 0) << f.name << " rows of " << k << " values";
  const int64_t kb = k / 32;
  const int64_t groups = f.tiles32 != nullptr ? m / 8 : 0;
  QuantizeActivations(x, m, k, groups, f.interleaved8 != nullptr, pool, scratch);
  if (f.interleaved8 != nullptr) {
    Interleaved8Matmul(f.interleaved8->isa[static_cast<int>(isa)], *scratch, w, row_bytes, y, m, n,
                       kb, /*granule=*/1, pool);
  } else if (f.tiles32 != nullptr) {
    Tiles32Matmul(f.tiles32->isa[static_cast<int>(isa)].floats, *scratch, w, row_bytes, y, m, n, kb,
                  groups, /*granule=*/1, pool);
  } else {
    CHECK(f.quant_tile != nullptr) << "no tile for " << f.name;
    const Q8Block* xq = scratch->rows.data();
    columns([&](int64_t j, int nr, int64_t i, int mr) {
      f.quant_tile(w + j * row_bytes, row_bytes, nr, xq + i * kb, kb, mr, k, y + i * n + j, n);
    });
  }
}

bool HasFixedSums(WeightFormat format) {
  const FormatKernels& f = FormatKernelsFor(format);
  return f.tiles32 != nullptr || f.interleaved8 != nullptr;
}

void QuantMatmulFixed(WeightFormat format, const float* x, const uint8_t* w, int64_t* y, int64_t m,
                      int64_t n, int64_t k, int64_t granule, ThreadPool* pool,
                      QuantScratch* scratch, QuantIsa isa) {
  CHECK_GE(m, 0);
  CHECK_GE(n, 0);
  CHECK_GE(k, 0);
  const FormatKernels& f = FormatKernelsFor(format);
  CHECK(HasFixedSums(format)) << f.name << " has no fixed-point tiles";
  CHECK_EQ(k % 32, 0) << f.name << " rows of " << k << " values";
  CHECK_GE(granule, 1);
  CHECK_EQ(k / 32 % granule, 0) << "rows of " << k / 32 << " blocks in granules of " << granule;
  if (m == 0 || n == 0) return;
  const int64_t row_bytes = RowBytes(format, k);
  const int64_t kb = k / 32;
  const int64_t groups = f.tiles32 != nullptr ? m / 8 : 0;
  QuantizeActivations(x, m, k, groups, f.interleaved8 != nullptr, pool, scratch);
  ScaleToFixedUnits(scratch);
  if (f.interleaved8 != nullptr) {
    Interleaved8Matmul(f.interleaved8->isa[static_cast<int>(isa)], *scratch, w, row_bytes, y, m, n,
                       kb, granule, pool);
  } else {
    Tiles32Matmul(f.tiles32->isa[static_cast<int>(isa)].fixed, *scratch, w, row_bytes, y, m, n, kb,
                  groups, granule, pool);
  }
}

void FixedToFloat(const int64_t* sums, int64_t count, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = FromFixed(sums[i]);
}

}  // namespace tpserve::kernels::cpu
