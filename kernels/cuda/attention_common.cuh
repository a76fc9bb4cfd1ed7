// Device helpers shared by the paged-attention kernels (attention_decode.cu,
// attention_prefill.cu) and the launchers LaunchPagedAttention (attention.cu) calls. Internal to
// kernels/cuda: include only from the attention .cu files.
//
// Scores are kept in log2 units: q is multiplied by scale * log2(e) once, so that
// softmax(scale * q.k) = exp2(s - max) / sum exp2(s - max) with s = (q * scale * log2 e).k.
#ifndef TPSERVE_KERNELS_CUDA_ATTENTION_COMMON_CUH_
#define TPSERVE_KERNELS_CUDA_ATTENTION_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention.cuh"

namespace tpserve::cuda::attention_internal {

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxHeadDim = 256;

// Sum / max of v over the 32 lanes of the warp, returned to every lane (all lanes must call).
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// The two bf16 of a 32-bit word (element 0 in the low half) as floats; exact.
__device__ __forceinline__ void UnpackBf16x2(uint32_t w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}

// out[0..kN) = p[0..kN) as floats, one vector load; p must be aligned to kN * 2 bytes.
template <int kN>
__device__ __forceinline__ void LoadBf16Vec(const __nv_bfloat16* p, float (&out)[kN]) {
  static_assert(kN == 2 || kN == 4 || kN == 8, "vector of 2, 4 or 8 bf16");
  if constexpr (kN == 8) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    UnpackBf16x2(u.x, out[0], out[1]);
    UnpackBf16x2(u.y, out[2], out[3]);
    UnpackBf16x2(u.z, out[4], out[5]);
    UnpackBf16x2(u.w, out[6], out[7]);
  } else if constexpr (kN == 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    UnpackBf16x2(u.x, out[0], out[1]);
    UnpackBf16x2(u.y, out[2], out[3]);
  } else {
    UnpackBf16x2(*reinterpret_cast<const uint32_t*>(p), out[0], out[1]);
  }
}

// out[i] = row[e0 + i] for e0 + i < head_dim, else 0 (i < kN). `vec`: head_dim % kN == 0 and
// e0 % kN == 0, so a chunk is either wholly inside the row (one aligned vector load, given a
// row start aligned to kN elements) or wholly outside it.
template <int kN>
__device__ __forceinline__ void LoadRowChunk(const __nv_bfloat16* row, int e0, int head_dim,
                                             bool vec, float (&out)[kN]) {
  if (vec) {
    if (e0 < head_dim) {
      LoadBf16Vec<kN>(row + e0, out);
    } else {
#pragma unroll
      for (int i = 0; i < kN; ++i) out[i] = 0.0f;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      out[i] = e0 + i < head_dim ? __bfloat162float(row[e0 + i]) : 0.0f;
    }
  }
}

// Cache slot of position `pos` of the sequence whose block table is `table`.
__device__ __forceinline__ int64_t CacheSlot(const int32_t* table, int pos, int block_size) {
  return static_cast<int64_t>(table[pos / block_size]) * block_size + pos % block_size;
}

// The kernel launchers LaunchPagedAttention runs (arguments already validated there).
// Decode splits then their combine, for args.n_decode > 0 decode sequences.
cudaError_t LaunchAttentionDecode(const PagedAttentionArgs& args, cudaStream_t stream);
// Causal prefill tiles, for args.n_prefill_tiles > 0 tiles.
cudaError_t LaunchAttentionPrefill(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace tpserve::cuda::attention_internal

#endif  // TPSERVE_KERNELS_CUDA_ATTENTION_COMMON_CUH_
