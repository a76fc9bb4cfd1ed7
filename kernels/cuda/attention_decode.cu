// Split-K flash decoding (attention.cuh): each decode sequence's context is cut into the key
// ranges of its AttentionPlan splits; one block per (decode sequence, KV head and head chunk,
// split) computes an un-normalised partial (running max m, sum l, acc) for the query heads of
// that KV head, and a combine kernel merges the splits of each query head in split order.
// Every block's arithmetic depends only on its own sequence, so results are batch-invariant and
// deterministic.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"

namespace tpserve::cuda {
namespace attention_internal {
namespace {

constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = kDecodeWarps * 32;
constexpr int kCombineThreads = 128;

// Partials layout, P = n_decode * n_q_heads * max_splits entries indexed
// p = (decode_index * n_q_heads + q_head) * max_splits + split:
//   acc: [P, head_dim] f32 at partials (sum over the split's keys of exp2(s - m) * v),
//   ml:  [P, 2] f32 at partials + P * head_dim ((m, l): the split's max score in log2 units,
//        -inf for a split without keys, and its sum of exp2(s - m)).
__device__ __forceinline__ int64_t PartialIndex(const PagedAttentionArgs& a, int decode_index,
                                                int q_head, int split) {
  return (static_cast<int64_t>(decode_index) * a.n_q_heads + q_head) * a.max_splits + split;
}
__device__ __forceinline__ float* PartialMl(const PagedAttentionArgs& a) {
  return a.partials + static_cast<int64_t>(a.n_decode) * a.n_q_heads * a.max_splits * a.head_dim;
}

// Block (blockIdx.x = decode index i, blockIdx.y = kv_head * n_chunks + chunk, blockIdx.z =
// split), kDecodeThreads threads. The block handles query heads kv_head * G + chunk * kG + g,
// g < min(kG, G - chunk * kG) (G = n_q_heads / n_kv_heads) of decode sequence i, over the
// split's keys [split * split_keys, min(context, (split + 1) * split_keys)), context =
// start_pos + 1. Warp w takes keys in groups of kU: k_begin + (t * kDecodeWarps + w) * kU + u;
// lane owns row elements [lane * kPer, lane * kPer + kPer) of head_dim (kD: head_dim rounded up
// to 64, 128 or 256; padded elements read as 0). Each warp keeps its own online softmax (m, l
// per head, acc per head and lane); the warps' states merge through shared memory at the end.
// Blocks with split >= the sequence's split count exit at once.
template <int kD, int kG>
__global__ void __launch_bounds__(kDecodeThreads)
    AttentionDecodeKernel(PagedAttentionArgs a, int n_chunks) {
  constexpr int kPer = kD / 32;
  constexpr int kU = 16 / kPer;  // keys per warp iteration: 8, 4, 2 (1 KiB of K+V in flight)
  __shared__ float s_acc[kDecodeWarps][kG][kD];  // per warp: acc of each head
  __shared__ float s_m[kDecodeWarps][kG];
  __shared__ float s_l[kDecodeWarps][kG];

  const int di = blockIdx.x;
  const int kv_head = blockIdx.y / n_chunks;
  const int g0 = (blockIdx.y % n_chunks) * kG;
  const int split = blockIdx.z;
  if (split >= a.decode_splits[di]) return;  // whole block: before any barrier
  const int seq = a.decode_seqs[di];
  const int group = static_cast<int>(a.n_q_heads / a.n_kv_heads);
  const int n_g = min(kG, group - g0);
  const int head_dim = static_cast<int>(a.head_dim);
  const int block_size = static_cast<int>(a.block_size);
  const int context = a.seq_start_pos[seq] + 1;
  const int split_keys = a.decode_split_keys[di];
  const int k_begin = split * split_keys;
  const int k_end = min(context, k_begin + split_keys);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int e0 = lane * kPer;
  const int q_head0 = kv_head * group + g0;

  // q: [kG][kPer] this lane's elements of each head, scaled to log2 units.
  const float q_scale = a.scale * kLog2e;
  const float* q_src = a.qkv + static_cast<int64_t>(a.seq_q_start[seq]) * a.qkv_stride +
                       static_cast<int64_t>(q_head0) * head_dim;  // [n_g, head_dim]
  float q[kG][kPer];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      q[g][i] = g < n_g && e0 + i < head_dim ? q_src[g * head_dim + e0 + i] * q_scale : 0.0f;
    }
  }
  float m[kG], l[kG], acc[kG][kPer];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc[g][i] = 0.0f;
  }

  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.block_table_stride;
  const int64_t slot_stride = a.n_kv_heads * a.head_dim;  // elements between cache slots
  const __nv_bfloat16* k_head = a.k_cache + static_cast<int64_t>(kv_head) * head_dim;
  const __nv_bfloat16* v_head = a.v_cache + static_cast<int64_t>(kv_head) * head_dim;
  const bool vec = head_dim % kPer == 0;

  // Loop bounds are warp-uniform, so every lane reaches each shuffle.
  for (int base = k_begin + warp * kU; base < k_end; base += kDecodeWarps * kU) {
    float kf[kU][kPer], vf[kU][kPer];  // keys base + u; zeros past k_end
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (base + u < k_end) {
        const int64_t slot = CacheSlot(table, base + u, block_size);
        LoadRowChunk<kPer>(k_head + slot * slot_stride, e0, head_dim, vec, kf[u]);
        LoadRowChunk<kPer>(v_head + slot * slot_stride, e0, head_dim, vec, vf[u]);
      } else {
#pragma unroll
        for (int i = 0; i < kPer; ++i) kf[u][i] = vf[u][i] = 0.0f;
      }
    }
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      if (g >= n_g) break;  // block-uniform
      float s[kU];          // scores of keys base + u; -inf past k_end
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < kPer; ++i) part = fmaf(q[g][i], kf[u][i], part);
        part = WarpSum(part);
        s[u] = base + u < k_end ? part : -INFINITY;
      }
      // Key `base` < k_end is always valid, so m_new is finite; exp2(-inf) = 0 covers both the
      // first iteration (m = -inf) and keys past k_end.
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kU; ++u) m_new = fmaxf(m_new, s[u]);
      const float corr = exp2f(m[g] - m_new);
      float p[kU];
      float p_sum = 0.0f;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        p[u] = exp2f(s[u] - m_new);
        p_sum += p[u];
      }
      l[g] = l[g] * corr + p_sum;
      m[g] = m_new;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        float x = acc[g][i] * corr;
#pragma unroll
        for (int u = 0; u < kU; ++u) x = fmaf(p[u], vf[u][i], x);
        acc[g][i] = x;
      }
    }
  }

  // Merge the warps: m = max_w m_w, l = sum_w l_w * exp2(m_w - m), acc likewise (warp order).
#pragma unroll
  for (int g = 0; g < kG; ++g) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) s_acc[warp][g][e0 + i] = acc[g][i];
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      s_m[warp][g] = m[g];
      s_l[warp][g] = l[g];
    }
  }
  __syncthreads();
  float* part_acc = a.partials;
  float* part_ml = PartialMl(a);
  for (int idx = threadIdx.x; idx < n_g * kD; idx += kDecodeThreads) {
    const int g = idx / kD;
    const int e = idx % kD;
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) m_max = fmaxf(m_max, s_m[w][g]);
    float o = 0.0f;
    float l_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float mw = s_m[w][g];
      const float weight = mw == -INFINITY ? 0.0f : exp2f(mw - m_max);  // warp without keys: 0
      o = fmaf(weight, s_acc[w][g][e], o);
      l_sum = fmaf(weight, s_l[w][g], l_sum);
    }
    const int64_t p = PartialIndex(a, di, q_head0 + g, split);
    if (e < head_dim) part_acc[p * head_dim + e] = o;
    if (e == 0) {
      part_ml[2 * p] = m_max;
      part_ml[2 * p + 1] = l_sum;
    }
  }
}

// Block (blockIdx.x = decode index i, blockIdx.y = query head h), kCombineThreads threads over
// head_dim: out[row, h] = sum_s acc_s * exp2(m_s - M) / sum_s l_s * exp2(m_s - M), M = max_s m_s,
// splits summed in order 0, 1, ... (deterministic). row = seq_q_start of the decode sequence.
__global__ void __launch_bounds__(kCombineThreads) AttentionCombineKernel(PagedAttentionArgs a) {
  const int di = blockIdx.x;
  const int h = blockIdx.y;
  const int seq = a.decode_seqs[di];
  const int n_splits = a.decode_splits[di];
  const int head_dim = static_cast<int>(a.head_dim);
  const int64_t p0 = PartialIndex(a, di, h, 0);
  const float* part_acc = a.partials + p0 * head_dim;  // [n_splits, head_dim]
  const float* part_ml = PartialMl(a) + 2 * p0;        // [n_splits, 2]
  float m_max = -INFINITY;
  for (int s = 0; s < n_splits; ++s) m_max = fmaxf(m_max, part_ml[2 * s]);
  float l_sum = 0.0f;
  for (int s = 0; s < n_splits; ++s) {
    const float ms = part_ml[2 * s];
    const float weight = ms == -INFINITY ? 0.0f : exp2f(ms - m_max);
    l_sum = fmaf(weight, part_ml[2 * s + 1], l_sum);
  }
  const float inv = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
  __nv_bfloat16* out = a.out + static_cast<int64_t>(a.seq_q_start[seq]) * a.n_q_heads * head_dim +
                       static_cast<int64_t>(h) * head_dim;  // [head_dim]
  for (int e = threadIdx.x; e < head_dim; e += kCombineThreads) {
    float o = 0.0f;
    for (int s = 0; s < n_splits; ++s) {
      const float ms = part_ml[2 * s];
      const float weight = ms == -INFINITY ? 0.0f : exp2f(ms - m_max);
      o = fmaf(weight, part_acc[static_cast<int64_t>(s) * head_dim + e], o);
    }
    out[e] = __float2bfloat16_rn(o * inv);
  }
}

template <int kD, int kG>
cudaError_t LaunchDecode(const PagedAttentionArgs& a, int n_chunks, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.n_decode), static_cast<unsigned>(a.n_kv_heads * n_chunks),
                  static_cast<unsigned>(a.max_splits));
  AttentionDecodeKernel<kD, kG><<<grid, kDecodeThreads, 0, stream>>>(a, n_chunks);
  return cudaGetLastError();
}

template <int kD>
cudaError_t LaunchDecodeForGroup(const PagedAttentionArgs& a, cudaStream_t stream) {
  const int64_t group = a.n_q_heads / a.n_kv_heads;
  if (group <= 1) return LaunchDecode<kD, 1>(a, 1, stream);
  if (group <= 2) return LaunchDecode<kD, 2>(a, 1, stream);
  if (group <= 4) return LaunchDecode<kD, 4>(a, 1, stream);
  // Larger groups: chunks of 8 heads (a block per chunk; K/V read once per chunk).
  return LaunchDecode<kD, 8>(a, static_cast<int>((group + 7) / 8), stream);
}

}  // namespace

cudaError_t LaunchAttentionDecode(const PagedAttentionArgs& a, cudaStream_t stream) {
  const int64_t group = a.n_q_heads / a.n_kv_heads;
  const int64_t n_chunks = group <= 4 ? 1 : (group + 7) / 8;
  if (a.n_kv_heads * n_chunks > 65535 || a.max_splits > 65535 || a.n_q_heads > 65535) {
    return cudaErrorInvalidValue;
  }
  cudaError_t err;
  if (a.head_dim <= 64) {
    err = LaunchDecodeForGroup<64>(a, stream);
  } else if (a.head_dim <= 128) {
    err = LaunchDecodeForGroup<128>(a, stream);
  } else {
    err = LaunchDecodeForGroup<256>(a, stream);
  }
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(a.n_decode), static_cast<unsigned>(a.n_q_heads));
  AttentionCombineKernel<<<grid, kCombineThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace attention_internal

int64_t AttentionPartialsFloats(int64_t n_decode, int64_t n_q_heads, int64_t max_splits,
                                int64_t head_dim) {
  return n_decode * n_q_heads * max_splits * (head_dim + 2);
}

}  // namespace tpserve::cuda
