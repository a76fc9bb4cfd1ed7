// LaunchPagedAttention (attention.cuh): checks the arguments, then runs the decode kernels
// (attention_decode.cu: splits, then their combine) and the prefill kernel
// (attention_prefill.cu) on the stream. The two write disjoint rows of `out`.
#include "kernels/cuda/attention_common.cuh"

namespace tpserve::cuda {

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.n_decode < 0 || args.n_prefill_tiles < 0 || args.n_q_heads <= 0 ||
      args.n_kv_heads <= 0 || args.n_q_heads % args.n_kv_heads != 0 || args.head_dim <= 0 ||
      args.head_dim > attention_internal::kMaxHeadDim || args.block_size <= 0 ||
      args.qkv_stride < (args.n_q_heads + 2 * args.n_kv_heads) * args.head_dim) {
    return cudaErrorInvalidValue;
  }
  if (args.n_decode == 0 && args.n_prefill_tiles == 0) return cudaSuccess;
  if (args.qkv == nullptr || args.k_cache == nullptr || args.v_cache == nullptr ||
      args.out == nullptr || args.seq_q_start == nullptr || args.seq_start_pos == nullptr ||
      args.block_tables == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (args.n_decode > 0) {
    if (args.max_splits <= 0 || args.partials == nullptr || args.decode_seqs == nullptr ||
        args.decode_splits == nullptr || args.decode_split_keys == nullptr) {
      return cudaErrorInvalidValue;
    }
    const cudaError_t err = attention_internal::LaunchAttentionDecode(args, stream);
    if (err != cudaSuccess) return err;
  }
  if (args.n_prefill_tiles > 0) {
    if (args.prefill_tile_queries <= 0 || args.seq_num_tokens == nullptr ||
        args.prefill_tile_seq == nullptr || args.prefill_tile_first == nullptr) {
      return cudaErrorInvalidValue;
    }
    const cudaError_t err = attention_internal::LaunchAttentionPrefill(args, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
