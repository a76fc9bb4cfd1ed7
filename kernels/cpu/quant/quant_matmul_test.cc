// QuantMatmul for every weight format against a plain scalar reference: the format's ggml
// dequantisation (scalar, as in ggml-common) of w, the activations' own Q8 rounding (d * q) for
// the integer formats, and a float64 dot product. Also: batch and thread invariance, bit for bit;
// the kernel layout (weight_layout.h) against the file's rows; QuantMatmulFixed's exact sums
// (each block's own contribution, and every split of k adding up to the whole).
#include "kernels/cpu/quant/weight_layout.h"

#include "kernels/cpu/quant/quant_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/quant/fixed_sum.h"
#include "kernels/cpu/quant/formats.h"
#include "kernels/cpu/test_util.h"

namespace tpserve::kernels::cpu {
namespace {

using testing::BitEqual;
using testing::RandomVector;

constexpr WeightFormat kFormats[] = {WeightFormat::kF16,  WeightFormat::kBF16, WeightFormat::kQ8_0,
                                     WeightFormat::kQ4_0, WeightFormat::kQ4_1, WeightFormat::kQ5_0,
                                     WeightFormat::kQ5_1, WeightFormat::kQ4_K, WeightFormat::kQ5_K,
                                     WeightFormat::kQ6_K};

bool IsInteger(WeightFormat f) {
  const FormatKernels& k = FormatKernelsFor(f);
  return k.quant_tile != nullptr || k.tiles32 != nullptr || k.interleaved8 != nullptr;
}

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
  std::memcpy(p, &h, 2);
}

// n rows of k values of `format`: random bytes, with every half-precision scale (and F16 / BF16
// value) replaced by a finite value of a realistic size, so that the rows decode to finite
// weights of magnitude ~0.01 - 1.
std::vector<uint8_t> RandomRows(WeightFormat format, int64_t n, int64_t k, uint32_t seed) {
  const FormatKernels& f = FormatKernelsFor(format);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<uint8_t> w(static_cast<size_t>(n * RowBytes(format, k)));
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(gen));
  const int64_t blocks = n * k / f.block_values;
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = w.data() + b * f.block_bytes;
    switch (format) {
      case WeightFormat::kF16:
        PutHalf(blk, value(gen));
        break;
      case WeightFormat::kBF16: {
        const float v = value(gen);
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        const uint16_t h = static_cast<uint16_t>(bits >> 16);
        std::memcpy(blk, &h, 2);
        break;
      }
      case WeightFormat::kQ8_0:
      case WeightFormat::kQ4_0:
      case WeightFormat::kQ5_0:
        PutHalf(blk, scale(gen));
        break;
      case WeightFormat::kQ4_1:
        PutHalf(blk, scale(gen));
        PutHalf(blk + 2, -8 * scale(gen));
        break;
      case WeightFormat::kQ5_1:
        PutHalf(blk, scale(gen));
        PutHalf(blk + 2, -16 * scale(gen));
        break;
      case WeightFormat::kQ4_K:
      case WeightFormat::kQ5_K:
        PutHalf(blk, scale(gen) / 8);
        PutHalf(blk + 2, scale(gen) / 8);
        break;
      case WeightFormat::kQ6_K:
        PutHalf(blk + 208, scale(gen) / 8);
        break;
      case WeightFormat::kF32:
        break;
    }
  }
  return w;
}

// w [n, k] of the file's layout in the layout QuantMatmul reads.
std::vector<uint8_t> Layout(WeightFormat format, const std::vector<uint8_t>& rows, int64_t n,
                            int64_t k) {
  std::vector<uint8_t> out(static_cast<size_t>(LayoutBytes(format, n, k)));
  ToLayout(format, rows.data(), n, k, out.data());
  return out;
}

// The activations as the integer tiles see them (Q8-rounded), or x itself.
std::vector<float> EffectiveX(WeightFormat format, const std::vector<float>& x, int64_t m,
                              int64_t k) {
  if (!IsInteger(format)) return x;
  std::vector<Q8Block> q(static_cast<size_t>(m * k / 32));
  QuantizeRowsQ8(x.data(), m, k, q.data());
  std::vector<float> out(x.size());
  for (size_t b = 0; b < q.size(); ++b) {
    for (int l = 0; l < 32; ++l) out[b * 32 + l] = q[b].d * static_cast<float>(q[b].q[l]);
  }
  return out;
}

void CheckAgainstReference(WeightFormat format, int64_t m, int64_t n, int64_t k, ThreadPool* pool) {
  const FormatKernels& f = FormatKernelsFor(format);
  const std::vector<float> x = RandomVector(m * k, static_cast<uint32_t>(1 + m + k));  // [m, k]
  const std::vector<uint8_t> w = RandomRows(format, n, k, static_cast<uint32_t>(7 + n));
  std::vector<float> wf(static_cast<size_t>(n * k));  // [n, k] dequantised
  f.dequantize(w.data(), n * k / f.block_values, wf.data());
  const std::vector<float> xe = EffectiveX(format, x, m, k);
  std::vector<float> y(static_cast<size_t>(m * n));
  QuantScratch scratch;
  QuantMatmul(format, x.data(), Layout(format, w, n, k).data(), y.data(), m, n, k, pool, &scratch);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0.0, abs_dot = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double t = static_cast<double>(xe[i * k + p]) * wf[j * k + p];
        dot += t;
        abs_dot += std::fabs(t);
      }
      // Float accumulation of k / 8 terms per lane plus per-block scale products.
      const double bound = (static_cast<double>(k) / 8 + 16) * 1.2e-7 * abs_dot + 1e-30;
      ASSERT_NEAR(y[i * n + j], dot, bound)
          << f.name << " m=" << m << " n=" << n << " k=" << k << " at (" << i << ", " << j << ")";
    }
  }
  // The activation rounding itself: within half a step of each block's scale.
  if (IsInteger(format)) {
    for (int64_t p = 0; p < m * k; p += 32) {
      float amax = 0;
      for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(x[p + l]));
      for (int l = 0; l < 32; ++l) {
        ASSERT_LE(std::fabs(xe[p + l] - x[p + l]), amax / 127 * 0.5001f + 1e-7f) << f.name;
      }
    }
  }
}

class QuantMatmulTest : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(QuantMatmulTest, MatchesScalarReferenceOverShapes) {
  const WeightFormat format = GetParam();
  const int64_t bv = std::max<int64_t>(32, FormatKernelsFor(format).block_values);
  ThreadPool pool(2);
  for (int64_t m : {1, 2, 3, 4, 5, 9, 13}) {
    for (int64_t n : {1, 3, 5, 17, 64}) {
      for (int64_t k : {bv, 3 * bv}) CheckAgainstReference(format, m, n, k, &pool);
    }
  }
  CheckAgainstReference(format, 1, 576, 6 * bv, nullptr);
  CheckAgainstReference(format, 7, 130, 2 * bv, &pool);
}

TEST_P(QuantMatmulTest, FloatFormatsTakeOddLengths) {
  const WeightFormat format = GetParam();
  if (IsInteger(format)) GTEST_SKIP() << "integer formats need whole blocks";
  ThreadPool pool(2);
  for (int64_t k : {1, 7, 9, 63}) CheckAgainstReference(format, 3, 11, k, &pool);
}

// Row i of an m-row product equals the m = 1 product of that row, bit for bit, at any thread
// count.
TEST_P(QuantMatmulTest, BatchAndThreadInvariant) {
  const WeightFormat format = GetParam();
  const int64_t k = 2 * std::max<int64_t>(32, FormatKernelsFor(format).block_values);
  const int64_t n = 45;
  for (int64_t m : {2, 3, 4, 5, 7, 37}) {  // colsn's row counts, and groups with rows past them
    const std::vector<float> x = RandomVector(m * k, 3);  // [m, k]
    const std::vector<uint8_t> w = Layout(format, RandomRows(format, n, k, 4), n, k);
    std::vector<float> batch(m * n);
    QuantScratch scratch;
    ThreadPool three(3);
    QuantMatmul(format, x.data(), w.data(), batch.data(), m, n, k, &three, &scratch);
    for (int64_t i = 0; i < m; ++i) {
      std::vector<float> alone(n);
      QuantMatmul(format, x.data() + i * k, w.data(), alone.data(), 1, n, k, nullptr, &scratch);
      ASSERT_TRUE(BitEqual(alone.data(), batch.data() + i * n, n)) << "row " << i << " of " << m;
    }
    ThreadPool two(2);
    std::vector<float> again(m * n);
    QuantMatmul(format, x.data(), w.data(), again.data(), m, n, k, &two, &scratch);
    EXPECT_TRUE(BitEqual(again.data(), batch.data(), m * n));
  }
}

// The AVX2 tiles and the AVX-512 VNNI tiles give the same results bit for bit, alone and in
// batches (whole interleaved groups and the rows past them).
TEST_P(QuantMatmulTest, InstructionSetsAgree) {
  const WeightFormat format = GetParam();
  if (FormatKernelsFor(format).tiles32 == nullptr &&
      FormatKernelsFor(format).interleaved8 == nullptr) {
    GTEST_SKIP() << "one instruction set";
  }
  if (BestQuantIsa() != QuantIsa::kAvx512Vnni) GTEST_SKIP() << "no AVX-512 VNNI here";
  const int64_t k = 5 * 32;
  const int64_t n = 29;
  ThreadPool two(2);
  QuantScratch scratch;
  for (int64_t m : {1, 3, 8, 19}) {
    const std::vector<float> x = RandomVector(m * k, 5);
    const std::vector<uint8_t> w = Layout(format, RandomRows(format, n, k, 6), n, k);
    std::vector<float> avx2(m * n), vnni(m * n);
    QuantMatmul(format, x.data(), w.data(), avx2.data(), m, n, k, &two, &scratch, QuantIsa::kAvx2);
    QuantMatmul(format, x.data(), w.data(), vnni.data(), m, n, k, &two, &scratch,
                QuantIsa::kAvx512Vnni);
    EXPECT_TRUE(BitEqual(avx2.data(), vnni.data(), m * n)) << "m = " << m;
  }
}

// The kernel layout holds the file's values: its rows read back as the file's rows decode, for
// row counts on and off whole tiles, and it takes the file's bytes (whole tiles of rows).
TEST_P(QuantMatmulTest, LayoutKeepsTheRows) {
  const WeightFormat format = GetParam();
  const FormatKernels& f = FormatKernelsFor(format);
  const int64_t k = 3 * std::max<int64_t>(32, f.block_values);
  for (int64_t n : {1, 7, 8, 9, 21}) {
    const std::vector<uint8_t> rows = RandomRows(format, n, k, static_cast<uint32_t>(11 + n));
    const std::vector<uint8_t> w = Layout(format, rows, n, k);
    const int64_t whole = f.interleaved8 != nullptr ? (n + 7) / 8 * 8 : n;
    EXPECT_EQ(static_cast<int64_t>(w.size()), whole * RowBytes(format, k));
    std::vector<float> want(static_cast<size_t>(n * k)), got(static_cast<size_t>(n * k));
    f.dequantize(rows.data(), n * k / f.block_values, want.data());
    DequantizeLayoutRows(format, w.data(), k, 0, n, got.data());
    ASSERT_TRUE(BitEqual(want.data(), got.data(), n * k)) << f.name << " n=" << n;
    // One row alone, as an embedding lookup reads it.
    std::vector<float> row(static_cast<size_t>(k));
    DequantizeLayoutRows(format, w.data(), k, n - 1, n, row.data());
    ASSERT_TRUE(BitEqual(want.data() + (n - 1) * k, row.data(), k)) << f.name << " n=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantMatmulTest, ::testing::ValuesIn(kFormats),
                         [](const ::testing::TestParamInfo<WeightFormat>& info) {
                           return std::string(FormatKernelsFor(info.param).name);
                         });

// Q8_0's tiles follow the scalar sequence their comment promises (interleaved8.h), bit for bit:
// per output, acc = fma(float(exact block sum), d_w * d_x, acc) over the blocks in order.
TEST(Interleaved8Test, FollowsTheScalarSequenceBitForBit) {
  const int64_t m = 11, n = 19, k = 7 * 32, kb = k / 32;
  const std::vector<float> x = RandomVector(m * k, 21);
  const std::vector<uint8_t> rows = RandomRows(WeightFormat::kQ8_0, n, k, 22);
  std::vector<Q8Block> xq(static_cast<size_t>(m * kb));
  QuantizeRowsQ8(x.data(), m, k, xq.data());
  const std::vector<uint8_t> w = Layout(WeightFormat::kQ8_0, rows, n, k);
  ThreadPool two(2);
  QuantScratch scratch;
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
    if (isa == QuantIsa::kAvx512Vnni && BestQuantIsa() != QuantIsa::kAvx512Vnni) continue;
    std::vector<float> y(static_cast<size_t>(m * n));
    QuantMatmul(WeightFormat::kQ8_0, x.data(), w.data(), y.data(), m, n, k, &two, &scratch, isa);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int64_t b = 0; b < kb; ++b) {
          const uint8_t* blk = rows.data() + (j * kb + b) * 34;
          const Q8Block& xb = xq[i * kb + b];
          int32_t isum = 0;
          for (int l = 0; l < 32; ++l) isum += static_cast<int8_t>(blk[2 + l]) * xb.q[l];
          acc = std::fma(static_cast<float>(isum), LoadF16(blk) * xb.d, acc);
        }
        ASSERT_EQ(std::memcmp(&acc, &y[i * n + j], sizeof(float)), 0)
            << "isa " << static_cast<int>(isa) << " at (" << i << ", " << j << "): " << acc
            << " vs " << y[i * n + j];
      }
    }
  }
}

// Q5_0 and Q5_1 follow tile32.h's sequence bit for bit on every tile (m = 1: Cols8; 3: ColsN; 8
// and 11: Rows8 and the rows it leaves), including rows of all-31 quants against x rows at
// +-127, where unsigned 5-bit products would overflow int16 sums of a whole block.
TEST(FiveBitTest, FollowsTheScalarSequenceBitForBit) {
  const int64_t n = 13, k = 9 * 32, kb = k / 32;
  ThreadPool two(2);
  QuantScratch scratch;
  for (WeightFormat format : {WeightFormat::kQ5_0, WeightFormat::kQ5_1}) {
    const FormatKernels& f = FormatKernelsFor(format);
    const int qh_at = format == WeightFormat::kQ5_0 ? 2 : 4;
    std::vector<uint8_t> rows = RandomRows(format, n, k, 31);
    for (int64_t j = 0; j < n; j += 3) {  // every third row: all quants 31
      for (int64_t b = 0; b < kb; ++b) {
        std::memset(rows.data() + (j * kb + b) * f.block_bytes + qh_at, 0xFF, 20);
      }
    }
    for (int64_t m : {1, 3, 8, 11}) {
      std::vector<float> x = RandomVector(m * k, static_cast<uint32_t>(40 + m));
      for (int64_t p = 0; p < k; ++p) x[p] = p % 64 < 32 ? 1.0f : -1.0f;  // row 0: q = +-127
      std::vector<Q8Block> xq(static_cast<size_t>(m * kb));
      QuantizeRowsQ8(x.data(), m, k, xq.data());
      for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
        if (isa == QuantIsa::kAvx512Vnni && BestQuantIsa() != QuantIsa::kAvx512Vnni) continue;
        std::vector<float> y(static_cast<size_t>(m * n));
        QuantMatmul(format, x.data(), Layout(format, rows, n, k).data(), y.data(), m, n, k, &two,
                    &scratch, isa);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (int64_t b = 0; b < kb; ++b) {
              const uint8_t* blk = rows.data() + (j * kb + b) * f.block_bytes;
              uint32_t qh;
              std::memcpy(&qh, blk + qh_at, 4);
              const Q8Block& xb = xq[i * kb + b];
              int32_t isum = 0;
              for (int l = 0; l < 32; ++l) {
                const int nibble = l < 16 ? blk[qh_at + 4 + l] & 0xF : blk[qh_at + 4 + l - 16] >> 4;
                isum += (nibble | static_cast<int>((qh >> l) & 1) << 4) * xb.q[l];
              }
              const float d = LoadF16(blk);
              const float mw = format == WeightFormat::kQ5_0 ? -16.0f * d : LoadF16(blk + 2);
              acc = std::fma(static_cast<float>(isum), d * xb.d, acc);
              acc = std::fma(mw, xb.ds, acc);
            }
            ASSERT_EQ(std::memcmp(&acc, &y[i * n + j], sizeof(float)), 0)
                << f.name << " m=" << m << " isa " << static_cast<int>(isa) << " at (" << i << ", "
                << j << "): " << acc << " vs " << y[i * n + j];
          }
        }
      }
    }
  }
}

// --- QuantMatmulFixed --------------------------------------------------------------------------

constexpr WeightFormat kFixedFormats[] = {WeightFormat::kQ8_0, WeightFormat::kQ4_0,
                                          WeightFormat::kQ4_1, WeightFormat::kQ5_0,
                                          WeightFormat::kQ5_1};

// Blocks [b0, b1) of each of the n rows (the file's layout) of a 32-value block format.
std::vector<uint8_t> BlockColumns(WeightFormat format, const std::vector<uint8_t>& rows, int64_t n,
                                  int64_t kb, int64_t b0, int64_t b1) {
  const int64_t bb = FormatKernelsFor(format).block_bytes;
  std::vector<uint8_t> out(static_cast<size_t>(n * (b1 - b0) * bb));
  for (int64_t j = 0; j < n; ++j) {
    std::memcpy(out.data() + j * (b1 - b0) * bb, rows.data() + (j * kb + b0) * bb,
                static_cast<size_t>((b1 - b0) * bb));
  }
  return out;
}

// Columns [c0, c1) of each of the m rows of x [m, k].
std::vector<float> Columns(const std::vector<float>& x, int64_t m, int64_t k, int64_t c0,
                           int64_t c1) {
  std::vector<float> out(static_cast<size_t>(m * (c1 - c0)));
  for (int64_t i = 0; i < m; ++i) {
    std::copy(x.begin() + i * k + c0, x.begin() + i * k + c1, out.begin() + i * (c1 - c0));
  }
  return out;
}

std::vector<int64_t> Fixed(WeightFormat format, const std::vector<float>& x,
                           const std::vector<uint8_t>& rows, int64_t m, int64_t n, int64_t k,
                           int64_t granule, ThreadPool* pool, QuantIsa isa = BestQuantIsa()) {
  std::vector<int64_t> y(static_cast<size_t>(m * n));
  QuantScratch scratch;
  QuantMatmulFixed(format, x.data(), Layout(format, rows, n, k).data(), y.data(), m, n, k, granule,
                   pool, &scratch, isa);
  return y;
}

TEST(FixedSumTest, RoundsHalfToEvenAndClamps) {
  EXPECT_EQ(ToFixed(1.0f), int64_t{1} << 32);
  EXPECT_EQ(ToFixed(-0.25f), -(int64_t{1} << 30));
  EXPECT_EQ(ToFixed(0x1p-33f), 0);    // half a unit: to even (0)
  EXPECT_EQ(ToFixed(0x1.8p-32f), 2);  // one and a half: to even (2)
  EXPECT_EQ(ToFixed(-0x1.8p-32f), -2);
  EXPECT_EQ(ToFixed(1e30f), int64_t{1} << 50);  // clamped to 2^18
  EXPECT_EQ(ToFixed(-INFINITY), -(int64_t{1} << 50));
  EXPECT_EQ(ToFixed(NAN), -(int64_t{1} << 50));
  EXPECT_EQ(FromFixed(ToFixed(3.75f)), 3.75f);
}

// Both vector conversions (on the chain in units of 2^-32) are the scalar definition, lane by
// lane, on random values of every size and on the edges; and a whole int32 run at the clamp does
// not overflow its parts.
TEST(FixedSumTest, VectorConversionsAreTheDefinition) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-60, 24);
  std::vector<float> v = {0.0f,     -0.0f,          0x1p-33f, 0x1.8p-32f, -0x1.8p-32f, 0x1p18f,
                          -0x1p18f, 0x1.000002p18f, INFINITY, -INFINITY,  NAN,         1e-40f,
                          0x1p-7f,  0x1.8p-7f,      0x1p-8f,  -0x1.8p-7f, 0x1.0000p-6f};
  while (v.size() % 8 != 0 || v.size() < 4096)
    v.push_back(std::ldexp(mantissa(gen), exponent(gen)));
  const auto scaled = [](const float* values) {
    return _mm256_mul_ps(_mm256_loadu_ps(values), _mm256_set1_ps(0x1p32f));
  };
  const auto stored = [](__m256i lo, __m256i hi) {
    std::vector<int64_t> got(8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(got.data()), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(got.data() + 4), hi);
    for (int l = 0; l < 8; ++l) got[l] -= l < 4 ? 7 : -7;
    return got;
  };
  const auto by_parts = [&](const float* values, int count) {
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    for (int i = 0; i < count; ++i) AddFixedParts8(scaled(values + 8 * i), &a, &b);
    __m256i lo = _mm256_set1_epi64x(7), hi = _mm256_set1_epi64x(-7);
    WidenFixedParts8(a, b, &lo, &hi);
    return stored(lo, hi);
  };
  for (size_t i = 0; i < v.size(); i += 8) {
    __m256i lo = _mm256_set1_epi64x(7), hi = _mm256_set1_epi64x(-7);
    AddFixed8(scaled(&v[i]), &lo, &hi);
    const std::vector<int64_t> doubles = stored(lo, hi), parts = by_parts(&v[i], 1);
    for (int l = 0; l < 8; ++l) {
      ASSERT_EQ(doubles[l], ToFixed(v[i + l])) << "AddFixed8, value " << v[i + l];
      ASSERT_EQ(parts[l], ToFixed(v[i + l])) << "AddFixedParts8, value " << v[i + l];
    }
  }
  std::vector<float> run(8 * kFixedRun);
  for (size_t i = 0; i < run.size(); ++i) run[i] = i % 8 < 4 ? 1e30f : -0x1p18f;
  const std::vector<int64_t> got = by_parts(run.data(), kFixedRun);
  for (int l = 0; l < 8; ++l) {
    EXPECT_EQ(got[l], (l < 4 ? 1 : -1) * (int64_t{kFixedRun} << 50)) << "lane " << l;
  }
}

class QuantMatmulFixedTest : public ::testing::TestWithParam<WeightFormat> {};

// Each sum is the sum of its granules' own chains, each granule computed alone (a QuantMatmul of
// the granule's columns is that granule's float chain from 0) and converted by ToFixed; and the
// float it stands for is the whole float chain's value, to its rounding.
// Rows of more than kFixedRun granules, too (a lone row's tile and Rows8 convert their chains in
// runs of that many, block_sums.h: m = 9 is a Rows8 tile and a lone row).
TEST_P(QuantMatmulFixedTest, SumsEachGranulesOwnChain) {
  const WeightFormat format = GetParam();
  ThreadPool two(2);
  for (auto [kb, granule, m] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{6, 1, 1},
                                                                                  {6, 1, 3},
                                                                                  {6, 1, 8},
                                                                                  {6, 1, 13},
                                                                                  {6, 2, 1},
                                                                                  {6, 2, 3},
                                                                                  {6, 2, 8},
                                                                                  {6, 2, 13},
                                                                                  {6, 3, 1},
                                                                                  {6, 3, 3},
                                                                                  {6, 3, 8},
                                                                                  {6, 3, 13},
                                                                                  {70, 1, 1},
                                                                                  {70, 1, 2},
                                                                                  {70, 1, 9},
                                                                                  {70, 2, 1},
                                                                                  {66, 1, 1},
                                                                                  {64, 1, 1}}) {
    const int64_t n = 21, k = 32 * kb;
    {
      const std::vector<float> x = RandomVector(m * k, static_cast<uint32_t>(31 + m));
      const std::vector<uint8_t> rows = RandomRows(format, n, k, static_cast<uint32_t>(32 + m));
      const std::vector<int64_t> got = Fixed(format, x, rows, m, n, k, granule, &two);
      std::vector<int64_t> want(static_cast<size_t>(m * n), 0);
      for (int64_t b = 0; b < kb; b += granule) {
        const std::vector<float> xb = Columns(x, m, k, 32 * b, 32 * (b + granule));
        const std::vector<uint8_t> wb =
            Layout(format, BlockColumns(format, rows, n, kb, b, b + granule), n, 32 * granule);
        std::vector<float> yb(static_cast<size_t>(m * n));
        QuantScratch scratch;
        QuantMatmul(format, xb.data(), wb.data(), yb.data(), m, n, 32 * granule, nullptr, &scratch);
        for (int64_t e = 0; e < m * n; ++e) want[e] += ToFixed(yb[e]);
      }
      ASSERT_EQ(got, want) << FormatKernelsFor(format).name << " m=" << m << " granule=" << granule;
      std::vector<float> chain(static_cast<size_t>(m * n)), exact(static_cast<size_t>(m * n));
      QuantScratch scratch;
      QuantMatmul(format, x.data(), Layout(format, rows, n, k).data(), chain.data(), m, n, k,
                  nullptr, &scratch);
      FixedToFloat(got.data(), m * n, exact.data());
      for (int64_t e = 0; e < m * n; ++e) {
        EXPECT_NEAR(exact[e], chain[e], 1e-5f * (1.0f + std::fabs(chain[e])));
      }
    }
  }
}

// The point: any split of k on granule boundaries, each slice's sums added as integers in any
// order, gives the whole product's sums bit for bit.
TEST_P(QuantMatmulFixedTest, EverySplitOfKAddsUpToTheWhole) {
  const WeightFormat format = GetParam();
  const int64_t m = 5, n = 19, kb = 18, k = 32 * kb;
  const std::vector<float> x = RandomVector(m * k, 41);
  const std::vector<uint8_t> rows = RandomRows(format, n, k, 42);
  ThreadPool two(2);
  for (int64_t granule : {1, 2, 3}) {
    const std::vector<int64_t> whole = Fixed(format, x, rows, m, n, k, granule, &two);
    int splits = 0;
    for (const std::vector<int64_t>& cuts : std::vector<std::vector<int64_t>>{
             {0, 9, 18}, {0, 6, 12, 18}, {0, 5, 9, 14, 18}, {0, 1, 17, 18}, {0, 2, 4, 8, 12, 18}}) {
      if (std::any_of(cuts.begin(), cuts.end(), [&](int64_t c) { return c % granule != 0; })) {
        continue;  // a cut inside a granule: not a split the shard plan makes
      }
      ++splits;
      std::vector<int64_t> sum(static_cast<size_t>(m * n), 0);
      for (size_t s = cuts.size() - 1; s-- > 0;) {  // last slice first: the order is free
        const int64_t b0 = cuts[s], b1 = cuts[s + 1];
        const std::vector<int64_t> part = Fixed(format, Columns(x, m, k, 32 * b0, 32 * b1),
                                                BlockColumns(format, rows, n, kb, b0, b1), m, n,
                                                32 * (b1 - b0), granule, nullptr);
        for (int64_t e = 0; e < m * n; ++e) sum[e] += part[e];
      }
      ASSERT_EQ(sum, whole) << FormatKernelsFor(format).name << ", " << cuts.size() - 1
                            << " slices, granule " << granule;
    }
    EXPECT_GE(splits, 2) << "granule " << granule;
  }
}

TEST_P(QuantMatmulFixedTest, BatchThreadAndInstructionSetInvariant) {
  const WeightFormat format = GetParam();
  const int64_t n = 45, k = 4 * 32;
  for (int64_t m : {2, 3, 4, 5, 7, 8, 9, 37}) {
    const std::vector<float> x = RandomVector(m * k, 51);
    const std::vector<uint8_t> rows = RandomRows(format, n, k, 52);
    ThreadPool three(3);
    const std::vector<int64_t> batch = Fixed(format, x, rows, m, n, k, 2, &three);
    EXPECT_EQ(Fixed(format, x, rows, m, n, k, 2, nullptr), batch) << "threads, m=" << m;
    for (int64_t i = 0; i < m; ++i) {
      const std::vector<float> row(x.begin() + i * k, x.begin() + (i + 1) * k);
      const std::vector<int64_t> one = Fixed(format, row, rows, 1, n, k, 2, nullptr);
      ASSERT_TRUE(std::equal(one.begin(), one.end(), batch.begin() + i * n))
          << "row " << i << " of " << m;
    }
    if (BestQuantIsa() == QuantIsa::kAvx512Vnni) {
      EXPECT_EQ(Fixed(format, x, rows, m, n, k, 2, &three, QuantIsa::kAvx512Vnni),
                Fixed(format, x, rows, m, n, k, 2, &three, QuantIsa::kAvx2));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantMatmulFixedTest, ::testing::ValuesIn(kFixedFormats),
                         [](const ::testing::TestParamInfo<WeightFormat>& info) {
                           return std::string(FormatKernelsFor(info.param).name);
                         });

TEST(QuantMatmulFixedTest, OnlyTheThirtyTwoValueIntegerFormats) {
  for (WeightFormat format : kFormats) {
    const bool want = format == WeightFormat::kQ8_0 || format == WeightFormat::kQ4_0 ||
                      format == WeightFormat::kQ4_1 || format == WeightFormat::kQ5_0 ||
                      format == WeightFormat::kQ5_1;
    EXPECT_EQ(HasFixedSums(format), want) << FormatKernelsFor(format).name;
  }
  EXPECT_FALSE(HasFixedSums(WeightFormat::kF32));
}

TEST(QuantizeRowsQ8Test, RoundsToNearestWithSums) {
  std::vector<float> x(64, 0.0f);
  x[0] = 1.27f;
  x[1] = -0.5f;   // 0.5 / 0.01 = 50
  x[2] = 0.015f;  // 1.5 steps: ties to even -> 2
  std::vector<Q8Block> q(2);
  QuantizeRowsQ8(x.data(), 1, 64, q.data());
  EXPECT_FLOAT_EQ(q[0].d, 0.01f);
  EXPECT_EQ(q[0].q[0], 127);
  EXPECT_EQ(q[0].q[1], -50);
  EXPECT_EQ(q[0].q[2], 2);
  EXPECT_FLOAT_EQ(q[0].ds, 0.01f * (127 - 50 + 2));
  EXPECT_EQ(q[1].d, 0.0f);  // an all-zero block
  EXPECT_EQ(q[1].q[31], 0);
}

}  // namespace
}  // namespace tpserve::kernels::cpu
