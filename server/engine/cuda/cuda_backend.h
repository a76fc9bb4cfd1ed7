// CudaBackend: the Backend of one GPU rank. Weights, GEMM inputs and the paged KV cache are
// bf16, the residual stream and GEMM outputs f32 (backend.h); GEMMs go through cuBLAS with f32
// accumulation, every other op is a kernel of kernels/cuda. Everything runs on one CUDA stream
// the backend owns; a stream-ordered NCCL communicator enqueues its collectives on the same
// stream (stream()), so a step synchronises the host only when its logits are downloaded. The
// step's metadata (token ids, positions, KV slots, block tables, the attention plan) travels
// in one host-to-device copy per step. Every CUDA and cuBLAS call is checked; a failure comes
// back as a Status naming file:line. Not thread-safe: one step at a time, on one thread.
#ifndef TPSERVE_SERVER_ENGINE_CUDA_CUDA_BACKEND_H_
#define TPSERVE_SERVER_ENGINE_CUDA_CUDA_BACKEND_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/gemm.h"
#include "server/engine/backend.h"

namespace tpserve::engine {

class CudaBackend final : public Backend {
 public:
  // A backend on GPU `device` (a CUDA ordinal) with a stream of its own.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  DType activation_dtype() const override { return DType::kBF16; }
  DType weight_dtype() const override { return DType::kBF16; }
  // Weights are dequantised to bf16 at load: nothing is held packed.
  bool HoldsPacked(DType) const override { return false; }
  int device() const { return device_; }
  // The stream every op runs on; valid as long as the backend.
  cudaStream_t stream() const { return stream_; }

  absl::StatusOr<Tensor> Allocate(int64_t rows, int64_t cols, DType dtype) override;
  absl::Status Upload(const void* host, DType host_dtype, Tensor t) override;
  absl::Status Download(const Tensor& t, float* host) override;
  absl::Status FillRandom(Tensor t, uint64_t seed, float scale) override;
  int64_t allocated_bytes() const override { return allocated_bytes_; }

  absl::Status InitKvCache(const KvCacheShape& shape) override;
  absl::Status InitRope(const RopeSettings& rope) override;
  absl::Status BeginStep(const StepBatch& batch) override;

  absl::Status Embed(const Tensor& table, Tensor out) override;
  absl::Status RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override;
  absl::Status AddRmsNorm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                          Tensor out) override;
  absl::Status Matmul(const Tensor& x, const Tensor& w, Tensor y) override;
  absl::Status Add(Tensor y, const Tensor& x) override;
  absl::Status Rope(Tensor qkv, int64_t n_q_heads, int64_t n_kv_heads) override;
  absl::Status Attention(int64_t layer, const Tensor& qkv, int64_t n_q_heads, int64_t n_kv_heads,
                         Tensor out) override;
  absl::Status SwiGlu(const Tensor& gate_up, Tensor out) override;
  absl::Status GatherLogitRows(const Tensor& x, Tensor out) override;

 private:
  // Offsets (in int32 units) of the step's metadata arrays in the packed buffers.
  struct MetaLayout {
    int64_t tokens = 0;              // [m]
    int64_t positions = 0;           // [m]
    int64_t slots = 0;               // [m]
    int64_t logit_rows = 0;          // [R]
    int64_t seq_q_start = 0;         // [n_seqs]
    int64_t seq_num_tokens = 0;      // [n_seqs]
    int64_t seq_start_pos = 0;       // [n_seqs]
    int64_t block_tables = 0;        // [n_seqs, block_table_stride]
    int64_t decode_seqs = 0;         // [n_decode]
    int64_t decode_splits = 0;       // [n_decode]
    int64_t decode_split_keys = 0;   // [n_decode]
    int64_t prefill_tile_seq = 0;    // [n_tiles]
    int64_t prefill_tile_first = 0;  // [n_tiles]
    int64_t total = 0;
  };

  CudaBackend(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  // Device memory of `bytes`, zeroed, freed with the backend.
  absl::StatusOr<void*> AllocateBytes(int64_t bytes);
  // Makes the packed metadata buffers hold `ints` int32 values.
  absl::Status ReserveMeta(int64_t ints);
  // Makes the split-K scratch hold `floats`.
  absl::Status ReservePartials(int64_t floats);
  // Makes the pinned download buffer hold `bytes`.
  absl::Status ReserveHostStaging(int64_t bytes);
  const int32_t* Meta(int64_t offset) const { return meta_device_ + offset; }

  const int device_;
  const cudaStream_t stream_;  // owned
  std::unique_ptr<cuda::Gemm> gemm_;
  std::vector<void*> buffers_;  // every Allocate, freed with the backend
  int64_t allocated_bytes_ = 0;

  KvCacheShape kv_shape_;
  std::vector<__nv_bfloat16*> k_cache_;  // [n_layers] each [blocks, block_size, n_kv, hd]
  std::vector<__nv_bfloat16*> v_cache_;  // [n_layers] each [blocks, block_size, n_kv, hd]

  float* rope_cos_ = nullptr;  // [rope_positions_, head_dim / 2]
  float* rope_sin_ = nullptr;  // [rope_positions_, head_dim / 2]
  int32_t rope_positions_ = 0;
  bool rope_neox_ = false;

  // The current step, host side.
  std::vector<int32_t> tokens_;  // [m], checked against the vocabulary in Embed
  int64_t num_logit_rows_ = 0;
  int64_t block_table_stride_ = 0;
  cuda::AttentionPlan plan_;
  MetaLayout layout_;
  std::vector<int32_t> meta_staging_;  // [layout_.total] assembled before the pinned copy

  int32_t* meta_host_ = nullptr;    // pinned [meta_capacity_]
  int32_t* meta_device_ = nullptr;  // [meta_capacity_]
  int64_t meta_capacity_ = 0;
  cudaEvent_t meta_copied_ = nullptr;  // recorded after each step's metadata copy
  float* partials_ = nullptr;          // [partials_capacity_] split-K scratch
  int64_t partials_capacity_ = 0;
  void* host_staging_ = nullptr;  // pinned [host_staging_bytes_] for downloads
  int64_t host_staging_bytes_ = 0;
};

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_CUDA_CUDA_BACKEND_H_
