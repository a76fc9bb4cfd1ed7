// Causal GQA prefill (attention.cuh): one block per (prefill tile, KV head). The tile's
// queries x the G query heads of that KV head are the block's rows; they walk the sequence's
// keys [0, last query position] in shared-memory tiles of K and V (f32), each row with its own
// causal limit and online softmax in f32. A row's arithmetic depends only on its sequence, its
// tile and the block shape, never on the rest of the batch.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"

namespace tpserve::cuda {
namespace attention_internal {
namespace {

constexpr int kKeys = 32;        // keys per shared-memory tile: one per lane in the score phase
constexpr int kRowsPerWarp = 4;  // rows (query, head) a warp carries through the key loop
constexpr int kMaxWarps = 8;     // warps per block
constexpr int kSmemDefault = 48 * 1024;  // dynamic shared memory without the opt-in

// Dynamic shared memory (f32) for `warps` warps: q rows, K tile (rows padded by one float so
// that lanes reading different keys hit different banks) and V tile.
//   s_q: [warps * kRowsPerWarp, kD], s_k: [kKeys, kD + 1], s_v: [kKeys, kD].
constexpr size_t SmemBytes(int kd, int warps) {
  return sizeof(float) * (static_cast<size_t>(warps) * kRowsPerWarp * kd +
                          static_cast<size_t>(kKeys) * (kd + 1) + static_cast<size_t>(kKeys) * kd);
}

// Fills s_k / s_v with keys kt .. kt + kKeys - 1 of the sequence (block table `table`), f32;
// positions >= key_end and elements >= head_dim as 0. All threads of the block call.
template <int kD>
__device__ __forceinline__ void LoadKvTile(const PagedAttentionArgs& a, const int32_t* table,
                                           int kt, int key_end, int kv_head, float* s_k,
                                           float* s_v) {
  constexpr int kKStride = kD + 1;
  const int head_dim = static_cast<int>(a.head_dim);
  const int block_size = static_cast<int>(a.block_size);
  const int64_t slot_stride = a.n_kv_heads * a.head_dim;
  const __nv_bfloat16* k_head = a.k_cache + static_cast<int64_t>(kv_head) * head_dim;
  const __nv_bfloat16* v_head = a.v_cache + static_cast<int64_t>(kv_head) * head_dim;
  if (head_dim % 8 == 0) {
    // 16-byte loads: chunk c of key j is elements [8c, 8c + 8), wholly inside or past head_dim.
    constexpr int kChunks = kD / 8;
    for (int idx = threadIdx.x; idx < kKeys * kChunks; idx += blockDim.x) {
      const int j = idx / kChunks;
      const int e = (idx % kChunks) * 8;
      const int pos = kt + j;
      float kf[8], vf[8];
      if (pos < key_end && e < head_dim) {
        const int64_t slot = CacheSlot(table, pos, block_size);
        LoadBf16Vec<8>(k_head + slot * slot_stride + e, kf);
        LoadBf16Vec<8>(v_head + slot * slot_stride + e, vf);
      } else {
#pragma unroll
        for (int t = 0; t < 8; ++t) kf[t] = vf[t] = 0.0f;
      }
#pragma unroll
      for (int t = 0; t < 8; ++t) s_k[j * kKStride + e + t] = kf[t];
      *reinterpret_cast<float4*>(s_v + j * kD + e) = make_float4(vf[0], vf[1], vf[2], vf[3]);
      *reinterpret_cast<float4*>(s_v + j * kD + e + 4) = make_float4(vf[4], vf[5], vf[6], vf[7]);
    }
  } else {
    for (int idx = threadIdx.x; idx < kKeys * kD; idx += blockDim.x) {
      const int j = idx / kD;
      const int e = idx % kD;
      const int pos = kt + j;
      float kx = 0.0f, vx = 0.0f;
      if (pos < key_end && e < head_dim) {
        const int64_t slot = CacheSlot(table, pos, block_size);
        kx = __bfloat162float(k_head[slot * slot_stride + e]);
        vx = __bfloat162float(v_head[slot * slot_stride + e]);
      }
      s_k[j * kKStride + e] = kx;
      s_v[j * kD + e] = vx;
    }
  }
}

// Block (blockIdx.x = tile, blockIdx.y = KV head), blockDim.x = 32 * warps (warps <=
// kMaxWarps), dynamic shared memory SmemBytes(kD, warps). Tile: queries first .. first + nq - 1
// of its sequence (nq = min(prefill_tile_queries, num_tokens - first)), at positions
// pos0 + qi, pos0 = start_pos + first. Row r in [0, G * nq): query qi = r % nq, head
// kv_head * G + r / nq. Rows are processed in passes of warps * kRowsPerWarp rows, warp w
// owning rows pass + w * kRowsPerWarp + j. Per key tile: lane = key for the scores (row r
// attends to keys <= pos0 + qi), then lane = elements [lane * kPer, lane * kPer + kPer) for
// acc += p * V. kD: head_dim rounded up to 64, 128 or 256 (padding elements are 0).
template <int kD>
__global__ void __launch_bounds__(kMaxWarps * 32) AttentionPrefillKernel(PagedAttentionArgs a) {
  constexpr int kPer = kD / 32;
  constexpr int kKStride = kD + 1;
  extern __shared__ float4 smem_f4[];
  const int warps = blockDim.x / 32;
  const int pass_rows = warps * kRowsPerWarp;
  float* s_q = reinterpret_cast<float*>(smem_f4);  // [pass_rows, kD]
  float* s_k = s_q + pass_rows * kD;               // [kKeys, kKStride]
  float* s_v = s_k + kKeys * kKStride;             // [kKeys, kD]

  const int tile = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int seq = a.prefill_tile_seq[tile];
  const int first = a.prefill_tile_first[tile];
  const int nq = min(a.prefill_tile_queries, a.seq_num_tokens[seq] - first);
  const int group = static_cast<int>(a.n_q_heads / a.n_kv_heads);
  const int head_dim = static_cast<int>(a.head_dim);
  const int pos0 = a.seq_start_pos[seq] + first;
  const int key_end = pos0 + nq;  // keys [0, key_end): the last query's causal range
  const int n_rows = group * nq;
  const int64_t row0 = static_cast<int64_t>(a.seq_q_start[seq]) + first;  // step row of qi = 0
  const int64_t out_stride = a.n_q_heads * a.head_dim;
  const float q_scale = a.scale * kLog2e;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.block_table_stride;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int e0 = lane * kPer;

  // Loop bounds (n_rows, key_end) are block-uniform: every thread reaches every barrier.
  for (int pass = 0; pass < n_rows; pass += pass_rows) {
    __syncthreads();  // the previous pass has finished reading s_q
    for (int idx = threadIdx.x; idx < pass_rows * kD; idx += blockDim.x) {
      const int r = pass + idx / kD;
      const int e = idx % kD;
      float x = 0.0f;
      if (r < n_rows && e < head_dim) {
        const int qi = r % nq;
        const int h = kv_head * group + r / nq;
        x = a.qkv[(row0 + qi) * a.qkv_stride + static_cast<int64_t>(h) * head_dim + e] * q_scale;
      }
      s_q[idx] = x;
    }
    const float* q_w = s_q + warp * kRowsPerWarp * kD;  // [kRowsPerWarp, kD] this warp's rows
    int q_pos[kRowsPerWarp];  // -1: no row (past n_rows), every key masked
    int warp_last = -1;       // the warp's largest query position
    float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kPer];
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int r = pass + warp * kRowsPerWarp + j;
      q_pos[j] = r < n_rows ? pos0 + r % nq : -1;
      warp_last = max(warp_last, q_pos[j]);
      m[j] = -INFINITY;
      l[j] = 0.0f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) acc[j][i] = 0.0f;
    }

    for (int kt = 0; kt < key_end; kt += kKeys) {
      __syncthreads();  // s_k / s_v are free; s_q is written (first tile)
      LoadKvTile<kD>(a, table, kt, key_end, kv_head, s_k, s_v);
      __syncthreads();
      if (kt > warp_last) continue;  // warp-uniform: all of the warp's rows mask this tile

      // Scores: lane = key kt + lane, all kRowsPerWarp rows at once.
      float s[kRowsPerWarp];
#pragma unroll
      for (int j = 0; j < kRowsPerWarp; ++j) s[j] = 0.0f;
      const float* k_row = s_k + lane * kKStride;
#pragma unroll 4
      for (int e = 0; e < kD; e += 4) {
        const float k0 = k_row[e], k1 = k_row[e + 1], k2 = k_row[e + 2], k3 = k_row[e + 3];
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) {
          const float4 qv = *reinterpret_cast<const float4*>(q_w + j * kD + e);  // broadcast
          s[j] = fmaf(qv.x, k0, s[j]);
          s[j] = fmaf(qv.y, k1, s[j]);
          s[j] = fmaf(qv.z, k2, s[j]);
          s[j] = fmaf(qv.w, k3, s[j]);
        }
      }
      const int key = kt + lane;
      float p[kRowsPerWarp];
#pragma unroll
      for (int j = 0; j < kRowsPerWarp; ++j) {
        // key <= q_pos < key_end: the causal mask also drops the tile's keys past key_end.
        const float sj = key <= q_pos[j] ? s[j] : -INFINITY;
        const float m_new = fmaxf(m[j], WarpMax(sj));
        // m_new is -inf only for a row with no key yet (a padding row): keep exp2 away from
        // -inf - -inf; then corr = exp2(-inf) = 0 and p = 0.
        const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = exp2f(m[j] - m_ref);
        p[j] = exp2f(sj - m_ref);
        l[j] = l[j] * corr + WarpSum(p[j]);
        m[j] = m_new;
#pragma unroll
        for (int i = 0; i < kPer; ++i) acc[j][i] *= corr;
      }

      // acc += P V: lane = elements e0 .. e0 + kPer - 1; key jj's p comes from lane jj.
      const int n_keys = min(kKeys, key_end - kt);
      for (int jj = 0; jj < n_keys; ++jj) {
        const float* v_row = s_v + jj * kD + e0;
        float v[kPer];
        if constexpr (kPer % 4 == 0) {
#pragma unroll
          for (int i = 0; i < kPer; i += 4) {
            const float4 v4 = *reinterpret_cast<const float4*>(v_row + i);
            v[i] = v4.x;
            v[i + 1] = v4.y;
            v[i + 2] = v4.z;
            v[i + 3] = v4.w;
          }
        } else {
          const float2 v2 = *reinterpret_cast<const float2*>(v_row);
          v[0] = v2.x;
          v[1] = v2.y;
        }
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) {
          const float pj = __shfl_sync(kFullMask, p[j], jj);
#pragma unroll
          for (int i = 0; i < kPer; ++i) acc[j][i] = fmaf(pj, v[i], acc[j][i]);
        }
      }
    }

    // out rows: [head_dim] at step row row0 + qi, column h * head_dim.
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int r = pass + warp * kRowsPerWarp + j;
      if (r >= n_rows) continue;
      const int qi = r % nq;
      const int h = kv_head * group + r / nq;
      const float inv = 1.0f / l[j];  // > 0: key 0 is in every row's range
      __nv_bfloat16* out = a.out + (row0 + qi) * out_stride + static_cast<int64_t>(h) * head_dim;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        if (e0 + i < head_dim) out[e0 + i] = __float2bfloat16_rn(acc[j][i] * inv);
      }
    }
  }
}

template <int kD>
cudaError_t LaunchPrefill(const PagedAttentionArgs& a, cudaStream_t stream) {
  const int64_t max_rows = a.n_q_heads / a.n_kv_heads * a.prefill_tile_queries;
  const int warps =
      static_cast<int>(std::min<int64_t>(kMaxWarps, (max_rows + kRowsPerWarp - 1) / kRowsPerWarp));
  const size_t smem = SmemBytes(kD, warps);
  if (smem > kSmemDefault) {
    const cudaError_t err =
        cudaFuncSetAttribute(AttentionPrefillKernel<kD>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(static_cast<unsigned>(a.n_prefill_tiles), static_cast<unsigned>(a.n_kv_heads));
  AttentionPrefillKernel<kD><<<grid, warps * 32, smem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAttentionPrefill(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.n_kv_heads > 65535) return cudaErrorInvalidValue;
  if (a.head_dim <= 64) return LaunchPrefill<64>(a, stream);
  if (a.head_dim <= 128) return LaunchPrefill<128>(a, stream);
  return LaunchPrefill<256>(a, stream);
}

}  // namespace attention_internal
}  // namespace tpserve::cuda
