// File: kernels/cpu/quant/q8_activations.h
//
// Activations quantised per row to 8 bits, the form the integer weight formats' tiles read:
// each run of 32 values becomes a Q8Block (one scale, 32 signed bytes), as llama.cpp's q8_0 /
// q8_1 do. A row's blocks depend on that row alone, so the quantisation keeps batch
// invariance. Stateless; thread-safe.
#ifndef TPSERVE_KERNELS_CPU_QUANT_Q8_ACTIVATIONS_H_
#define TPSERVE_KERNELS_CPU_QUANT_Q8_ACTIVATIONS_H_

#include <cstdint>

namespace tpserve::kernels::cpu {

// 32 values x[l] ~= d * q[l], d = max|x| / 127 (0 for an all-zero run), q in [-127, 127];
// ds = d * sum(q), for formats whose values carry an offset (Q4_0's -8, Q4_1's and the
// K-quants' mins).
struct Q8Block {
  float d;
  float ds;
  int8_t q[32];
};
static_assert(sizeof(Q8Block) == 40);

// Block b of 8 rows of Q8Blocks, interleaved for the batched tiles (tile32.h): the 32 quants
// of each row as 8 groups of 4 bytes, group g of rows 0..7 side by side.
struct alignas(32) Q8Block8 {
  float d[8];        // row r's d
  float ds[8];       // row r's ds
  int32_t qsum[8];   // row r's sum of quants
  int8_t q[8 * 32];  // q[32 * g + 4 * r + t] = row r's quant 4 * g + t
};
static_assert(sizeof(Q8Block8) == 352);

// Quantises x: [m, k] f32 (row stride k; k a multiple of 32) into out: [m, k / 32] blocks.
// Rounds to nearest, ties to even.
void QuantizeRowsQ8(const float* x, int64_t m, int64_t k, Q8Block* out);

// sums[b] = the sum of blocks[b]'s 32 quants, for b < count (the interleaved tiles' VNNI
// products take it back from their unsigned form).
void SumQuants(const Q8Block* blocks, int64_t count, int32_t* sums);

// Interleaves rows [0, 8) of rows: [8, kb] blocks (row stride kb) into out: [kb].
void InterleaveRows8(const Q8Block* rows, int64_t kb, Q8Block8* out);

}  // namespace tpserve::kernels::cpu

#endif  // TPSERVE_KERNELS_CPU_QUANT_Q8_ACTIVATIONS_H_
