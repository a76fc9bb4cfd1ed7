// LaunchKvCacheWrite (attention.cuh): the step's new k / v heads, f32 in the fused QKV rows, are
// rounded to bf16 and stored at their cache slot.
#include "kernels/cuda/attention.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// One block per step row r; threads stride over the row's n_kv_heads * head_dim elements.
//   qkv: [m, qkv_stride] f32, k at column k_col, v at column v_col, each row_elems long;
//   slots: [m] (a negative slot: row skipped);
//   k_cache, v_cache: [num_blocks * block_size, row_elems] bf16 (slot-major view of
//   [num_blocks, block_size, n_kv_heads, head_dim]).
__global__ void KvCacheWriteKernel(const float* __restrict__ qkv, int64_t qkv_stride, int64_t k_col,
                                   int64_t v_col, int64_t row_elems,
                                   const int32_t* __restrict__ slots,
                                   __nv_bfloat16* __restrict__ k_cache,
                                   __nv_bfloat16* __restrict__ v_cache) {
  const int64_t r = blockIdx.x;
  const int32_t slot = slots[r];
  if (slot < 0) return;
  const float* k_src = qkv + r * qkv_stride + k_col;  // [row_elems]
  const float* v_src = qkv + r * qkv_stride + v_col;  // [row_elems]
  __nv_bfloat16* k_dst = k_cache + static_cast<int64_t>(slot) * row_elems;
  __nv_bfloat16* v_dst = v_cache + static_cast<int64_t>(slot) * row_elems;
  for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) {
    k_dst[e] = __float2bfloat16_rn(k_src[e]);
    v_dst[e] = __float2bfloat16_rn(v_src[e]);
  }
}

}  // namespace

cudaError_t LaunchKvCacheWrite(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.m < 0 || args.n_q_heads <= 0 || args.n_kv_heads <= 0 || args.head_dim <= 0 ||
      args.qkv_stride < (args.n_q_heads + 2 * args.n_kv_heads) * args.head_dim ||
      args.m > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  if (args.m == 0) return cudaSuccess;
  if (args.qkv == nullptr || args.slots == nullptr || args.k_cache == nullptr ||
      args.v_cache == nullptr) {
    return cudaErrorInvalidValue;
  }
  const int64_t row_elems = args.n_kv_heads * args.head_dim;
  const int64_t k_col = args.n_q_heads * args.head_dim;
  const int64_t v_col = k_col + row_elems;
  KvCacheWriteKernel<<<static_cast<unsigned>(args.m), kThreads, 0, stream>>>(
      args.qkv, args.qkv_stride, k_col, v_col, row_elems, args.slots, args.k_cache, args.v_cache);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
