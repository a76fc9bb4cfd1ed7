#include "server/engine/cuda/cuda_backend.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/add.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/fill_random.cuh"
#include "kernels/cuda/gather_rows.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/swiglu.cuh"
#include "server/common/status_macros.h"
#include "server/engine/rope_params.h"

namespace tpserve::engine {
namespace {

float* F32(const Tensor& t) { return static_cast<float*>(t.data); }
__nv_bfloat16* Bf16(const Tensor& t) { return static_cast<__nv_bfloat16*>(t.data); }

absl::Status ExpectDType(const char* what, const Tensor& t, DType want) {
  if (t.dtype == want) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": want ", DTypeName(want), ", got ", DTypeName(t.dtype)));
}

// Appends `values` to `out` and returns where they start.
int64_t Append(std::vector<int32_t>* out, const std::vector<int32_t>& values) {
  const auto at = static_cast<int64_t>(out->size());
  out->insert(out->end(), values.begin(), values.end());
  return at;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device) {
  int count = 0;
  if (absl::Status s =
          cuda::CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount", __FILE__, __LINE__);
      !s.ok()) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("no usable GPU: ", s.message()));
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", device, " is outside the ", count, " visible GPUs"));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(device, stream));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&backend->meta_copied_, cudaEventDisableTiming));
  ASSIGN_OR_RETURN(backend->gemm_, cuda::Gemm::Create(stream));
  return backend;
}

CudaBackend::~CudaBackend() {
  // Work still queued may read the buffers: let it finish first.
  absl::Status s = cuda::CudaStatus(cudaSetDevice(device_), "cudaSetDevice", __FILE__, __LINE__);
  s.Update(cuda::CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", __FILE__,
                            __LINE__));
  gemm_.reset();
  for (void* p : buffers_) {
    s.Update(cuda::CudaStatus(cudaFree(p), "cudaFree", __FILE__, __LINE__));
  }
  for (void* p : {static_cast<void*>(meta_device_), static_cast<void*>(partials_)}) {
    if (p != nullptr) s.Update(cuda::CudaStatus(cudaFree(p), "cudaFree", __FILE__, __LINE__));
  }
  for (void* p : {static_cast<void*>(meta_host_), host_staging_}) {
    if (p != nullptr) {
      s.Update(cuda::CudaStatus(cudaFreeHost(p), "cudaFreeHost", __FILE__, __LINE__));
    }
  }
  if (meta_copied_ != nullptr) {
    s.Update(
        cuda::CudaStatus(cudaEventDestroy(meta_copied_), "cudaEventDestroy", __FILE__, __LINE__));
  }
  s.Update(cuda::CudaStatus(cudaStreamDestroy(stream_), "cudaStreamDestroy", __FILE__, __LINE__));
  if (!s.ok()) LOG(WARNING) << "cuda backend on device " << device_ << ": teardown: " << s;
}

absl::StatusOr<void*> CudaBackend::AllocateBytes(int64_t bytes) {
  void* p = nullptr;
  const size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  cudaError_t err = cudaMalloc(&p, n);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so later calls are not blamed
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    return absl::ResourceExhaustedError(absl::StrCat("GPU ", device_, ": cannot allocate ", n,
                                                     " bytes (", free_bytes, " of ", total_bytes,
                                                     " free)"));
  }
  CUDA_RETURN_IF_ERROR(err);
  buffers_.push_back(p);
  allocated_bytes_ += static_cast<int64_t>(n);
  // Fresh KV blocks and workspaces read as zeros, never garbage, as on the CPU.
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, n, stream_));
  return p;
}

absl::StatusOr<Tensor> CudaBackend::Allocate(int64_t rows, int64_t cols, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA backend holds f32 and bf16 tensors, not ", DTypeName(dtype)));
  }
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor shape [", rows, ", ", cols, "]"));
  }
  ASSIGN_OR_RETURN(void* p, AllocateBytes(rows * cols * DTypeBytes(dtype)));
  return Tensor{p, rows, cols, dtype};
}

absl::Status CudaBackend::Upload(const void* host_data, DType host_dtype, Tensor t) {
  if (host_dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA backend uploads f32 host data, not ", DTypeName(host_dtype)));
  }
  const auto* host = static_cast<const float*>(host_data);
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  if (t.dtype == DType::kF32) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.data, host, t.bytes(), cudaMemcpyHostToDevice, stream_));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // `host` may go once we return
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ExpectDType("Upload", t, DType::kBF16));
  std::vector<uint16_t> bits(t.elements());
  cuda::FloatsToBf16(host, t.elements(), bits.data());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(t.data, bits.data(), t.bytes(), cudaMemcpyHostToDevice, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::ReserveHostStaging(int64_t bytes) {
  if (bytes <= host_staging_bytes_) return absl::OkStatus();
  if (host_staging_ != nullptr) {
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    CUDA_RETURN_IF_ERROR(cudaFreeHost(host_staging_));
    host_staging_ = nullptr;
    host_staging_bytes_ = 0;
  }
  CUDA_RETURN_IF_ERROR(cudaMallocHost(&host_staging_, static_cast<size_t>(bytes)));
  host_staging_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status CudaBackend::Download(const Tensor& t, float* host) {
  RETURN_IF_ERROR(ReserveHostStaging(t.bytes()));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_staging_, t.data, t.bytes(), cudaMemcpyDeviceToHost, stream_));
  // The one host synchronisation of a step: kernel faults of the step surface here.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (t.dtype == DType::kF32) {
    std::memcpy(host, host_staging_, t.bytes());
  } else {
    RETURN_IF_ERROR(ExpectDType("Download", t, DType::kBF16));
    cuda::Bf16ToFloats(static_cast<const uint16_t*>(host_staging_), t.elements(), host);
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::FillRandom(Tensor t, uint64_t seed, float scale) {
  if (t.dtype == DType::kF32) {
    CUDA_RETURN_IF_ERROR(cuda::LaunchFillRandom(F32(t), t.elements(), seed, scale, stream_));
  } else {
    RETURN_IF_ERROR(ExpectDType("FillRandom", t, DType::kBF16));
    CUDA_RETURN_IF_ERROR(cuda::LaunchFillRandom(Bf16(t), t.elements(), seed, scale, stream_));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::InitKvCache(const KvCacheShape& shape) {
  kv_shape_ = shape;
  k_cache_.clear();
  v_cache_.clear();
  // Per layer, K and V: [num_blocks, block_size, n_kv_heads, head_dim] bf16.
  const int64_t per_layer = shape.num_blocks * shape.block_size * shape.n_kv_heads * shape.head_dim;
  for (int64_t l = 0; l < shape.n_layers; ++l) {
    ASSIGN_OR_RETURN(void* k, AllocateBytes(per_layer * DTypeBytes(DType::kBF16)));
    ASSIGN_OR_RETURN(void* v, AllocateBytes(per_layer * DTypeBytes(DType::kBF16)));
    k_cache_.push_back(static_cast<__nv_bfloat16*>(k));
    v_cache_.push_back(static_cast<__nv_bfloat16*>(v));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::InitRope(const RopeSettings& rope) {
  // The CPU table's floats, so both backends rotate by identical angles.
  const kernels::cpu::RopeTable table(ToRopeParams(rope));
  const int64_t half = rope.head_dim / 2;
  std::vector<float> cos(rope.max_position * half), sin(rope.max_position * half);
  for (int32_t pos = 0; pos < rope.max_position; ++pos) {
    table.CosSin(pos, &cos[pos * half], &sin[pos * half]);
  }
  ASSIGN_OR_RETURN(Tensor c, Allocate(rope.max_position, half, DType::kF32));
  ASSIGN_OR_RETURN(Tensor s, Allocate(rope.max_position, half, DType::kF32));
  RETURN_IF_ERROR(Upload(cos.data(), DType::kF32, c));
  RETURN_IF_ERROR(Upload(sin.data(), DType::kF32, s));
  rope_cos_ = F32(c);
  rope_sin_ = F32(s);
  rope_positions_ = rope.max_position;
  rope_neox_ = rope.style == model::RopeStyle::kNeox;
  return absl::OkStatus();
}

absl::Status CudaBackend::ReserveMeta(int64_t ints) {
  if (ints <= meta_capacity_) return absl::OkStatus();
  const int64_t capacity = std::max<int64_t>(ints, 2 * meta_capacity_);
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // nothing may still read the old ones
  if (meta_host_ != nullptr) CUDA_RETURN_IF_ERROR(cudaFreeHost(meta_host_));
  if (meta_device_ != nullptr) CUDA_RETURN_IF_ERROR(cudaFree(meta_device_));
  meta_host_ = nullptr;
  meta_device_ = nullptr;
  meta_capacity_ = 0;
  CUDA_RETURN_IF_ERROR(cudaMallocHost(&meta_host_, capacity * sizeof(int32_t)));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&meta_device_, capacity * sizeof(int32_t)));
  meta_capacity_ = capacity;
  return absl::OkStatus();
}

absl::Status CudaBackend::ReservePartials(int64_t floats) {
  if (floats <= partials_capacity_) return absl::OkStatus();
  const int64_t capacity = std::max<int64_t>(floats, 2 * partials_capacity_);
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (partials_ != nullptr) CUDA_RETURN_IF_ERROR(cudaFree(partials_));
  partials_ = nullptr;
  partials_capacity_ = 0;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&partials_, capacity * sizeof(float)));
  partials_capacity_ = capacity;
  return absl::OkStatus();
}

absl::Status CudaBackend::BeginStep(const StepBatch& batch) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const int64_t bs = kv_shape_.block_size;
  std::vector<int32_t> positions, slots, logit_rows, num_tokens, start_pos;
  tokens_.clear();
  block_table_stride_ = 1;
  for (const StepSequence& seq : batch.sequences) {
    block_table_stride_ =
        std::max<int64_t>(block_table_stride_, static_cast<int64_t>(seq.block_table.size()));
  }
  std::vector<int32_t> block_tables(batch.sequences.size() * block_table_stride_, 0);
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const StepSequence& seq = batch.sequences[s];
    const auto t = static_cast<int64_t>(seq.tokens.size());  // within limits: ValidateStep
    for (size_t b = 0; b < seq.block_table.size(); ++b) {
      block_tables[s * block_table_stride_ + b] = seq.block_table[b];
    }
    for (int64_t i = 0; i < t; ++i) {
      const int64_t pos = seq.start_pos + i;
      tokens_.push_back(seq.tokens[i]);
      positions.push_back(static_cast<int32_t>(pos));
      slots.push_back(static_cast<int32_t>(seq.block_table[pos / bs] * bs + pos % bs));
    }
    const auto row_end = static_cast<int32_t>(tokens_.size());
    for (int64_t r = row_end - seq.num_logit_rows(); r < row_end; ++r) {
      logit_rows.push_back(static_cast<int32_t>(r));
    }
    num_tokens.push_back(static_cast<int32_t>(t));
    start_pos.push_back(seq.start_pos);
  }
  num_logit_rows_ = static_cast<int64_t>(logit_rows.size());
  cuda::AttentionPlanOptions plan_options;
  plan_options.block_size = static_cast<int32_t>(bs);
  plan_ = cuda::PlanAttention(num_tokens, start_pos, plan_options);

  // One packed copy: every array at its offset.
  meta_staging_.clear();
  layout_.tokens = Append(&meta_staging_, tokens_);
  layout_.positions = Append(&meta_staging_, positions);
  layout_.slots = Append(&meta_staging_, slots);
  layout_.logit_rows = Append(&meta_staging_, logit_rows);
  layout_.seq_q_start = Append(&meta_staging_, plan_.seq_q_start);
  layout_.seq_num_tokens = Append(&meta_staging_, plan_.seq_num_tokens);
  layout_.seq_start_pos = Append(&meta_staging_, plan_.seq_start_pos);
  layout_.block_tables = Append(&meta_staging_, block_tables);
  layout_.decode_seqs = Append(&meta_staging_, plan_.decode_seqs);
  layout_.decode_splits = Append(&meta_staging_, plan_.decode_splits);
  layout_.decode_split_keys = Append(&meta_staging_, plan_.decode_split_keys);
  layout_.prefill_tile_seq = Append(&meta_staging_, plan_.prefill_tile_seq);
  layout_.prefill_tile_first = Append(&meta_staging_, plan_.prefill_tile_first);
  layout_.total = static_cast<int64_t>(meta_staging_.size());

  RETURN_IF_ERROR(ReserveMeta(layout_.total));
  // The previous step's copy may still be reading the pinned buffer.
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(meta_copied_));
  std::memcpy(meta_host_, meta_staging_.data(), layout_.total * sizeof(int32_t));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(meta_device_, meta_host_, layout_.total * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(meta_copied_, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Embed(const Tensor& table, Tensor out) {
  RETURN_IF_ERROR(ExpectDType("Embed table", table, DType::kBF16));
  RETURN_IF_ERROR(ExpectDType("Embed out", out, DType::kF32));
  const auto m = static_cast<int64_t>(tokens_.size());
  if (out.rows != m || out.cols != table.cols) {
    return absl::InternalError(absl::StrCat("Embed out: expected [", m, ", ", table.cols,
                                            "], got [", out.rows, ", ", out.cols, "]"));
  }
  CUDA_RETURN_IF_ERROR(cuda::LaunchEmbeddingGather(Bf16(table), Meta(layout_.tokens), m, table.cols,
                                                   F32(out), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) {
  RETURN_IF_ERROR(ExpectDType("RmsNorm x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectDType("RmsNorm weight", weight, DType::kF32));
  if (out.dtype == DType::kF32) {
    CUDA_RETURN_IF_ERROR(
        cuda::LaunchRmsNorm(F32(x), F32(weight), eps, x.rows, x.cols, F32(out), stream_));
  } else {
    RETURN_IF_ERROR(ExpectDType("RmsNorm out", out, DType::kBF16));
    CUDA_RETURN_IF_ERROR(
        cuda::LaunchRmsNorm(F32(x), F32(weight), eps, x.rows, x.cols, Bf16(out), stream_));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::AddRmsNorm(Tensor residual, const Tensor& x, const Tensor& weight,
                                     float eps, Tensor out) {
  RETURN_IF_ERROR(ExpectDType("AddRmsNorm residual", residual, DType::kF32));
  RETURN_IF_ERROR(ExpectDType("AddRmsNorm x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectDType("AddRmsNorm weight", weight, DType::kF32));
  if (out.dtype == DType::kF32) {
    CUDA_RETURN_IF_ERROR(cuda::LaunchAddRmsNorm(F32(residual), F32(x), F32(weight), eps, x.rows,
                                                x.cols, F32(out), stream_));
  } else {
    RETURN_IF_ERROR(ExpectDType("AddRmsNorm out", out, DType::kBF16));
    CUDA_RETURN_IF_ERROR(cuda::LaunchAddRmsNorm(F32(residual), F32(x), F32(weight), eps, x.rows,
                                                x.cols, Bf16(out), stream_));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Matmul(const Tensor& x, const Tensor& w, Tensor y) {
  if (x.cols != w.cols || y.rows != x.rows || y.cols != w.rows) {
    return absl::InternalError(absl::StrCat("Matmul shapes: x [", x.rows, ", ", x.cols, "] w [",
                                            w.rows, ", ", w.cols, "] y [", y.rows, ", ", y.cols,
                                            "]"));
  }
  RETURN_IF_ERROR(ExpectDType("Matmul x", x, DType::kBF16));
  RETURN_IF_ERROR(ExpectDType("Matmul w", w, DType::kBF16));
  RETURN_IF_ERROR(ExpectDType("Matmul y", y, DType::kF32));
  return gemm_->Run(Bf16(x), Bf16(w), F32(y), x.rows, w.rows, x.cols);
}

absl::Status CudaBackend::Add(Tensor y, const Tensor& x) {
  RETURN_IF_ERROR(ExpectDType("Add y", y, DType::kF32));
  RETURN_IF_ERROR(ExpectDType("Add x", x, DType::kF32));
  CUDA_RETURN_IF_ERROR(cuda::LaunchAdd(F32(y), F32(x), y.elements(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Rope(Tensor qkv, int64_t n_q_heads, int64_t n_kv_heads) {
  RETURN_IF_ERROR(ExpectDType("Rope qkv", qkv, DType::kF32));
  // The q heads and the k heads are adjacent at the start of each row: one launch rotates
  // both, [n_q + n_kv, head_dim] per row.
  cuda::RopeArgs args;
  args.x = F32(qkv);
  args.row_stride = qkv.cols;
  args.pos = Meta(layout_.positions);
  args.m = qkv.rows;
  args.n_heads = n_q_heads + n_kv_heads;
  args.head_dim = kv_shape_.head_dim;
  args.cos = rope_cos_;
  args.sin = rope_sin_;
  args.neox = rope_neox_;
  CUDA_RETURN_IF_ERROR(cuda::LaunchRope(args, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Attention(int64_t layer, const Tensor& qkv, int64_t n_q_heads,
                                    int64_t n_kv_heads, Tensor out) {
  RETURN_IF_ERROR(ExpectDType("Attention qkv", qkv, DType::kF32));
  RETURN_IF_ERROR(ExpectDType("Attention out", out, DType::kBF16));
  if (layer < 0 || layer >= static_cast<int64_t>(k_cache_.size())) {
    return absl::InternalError(absl::StrCat("Attention: layer ", layer, " has no KV cache"));
  }
  if (n_kv_heads != kv_shape_.n_kv_heads || n_q_heads % n_kv_heads != 0) {
    return absl::InternalError(absl::StrCat("Attention: ", n_q_heads, " query heads over ",
                                            n_kv_heads, " KV heads; the cache holds ",
                                            kv_shape_.n_kv_heads));
  }
  const int64_t hd = kv_shape_.head_dim;
  RETURN_IF_ERROR(ReservePartials(
      cuda::AttentionPartialsFloats(plan_.num_decode(), n_q_heads, plan_.max_splits, hd)));
  cuda::PagedAttentionArgs a;
  a.qkv = F32(qkv);
  a.qkv_stride = qkv.cols;
  a.m = qkv.rows;
  a.n_q_heads = n_q_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.k_cache = k_cache_[layer];
  a.v_cache = v_cache_[layer];
  a.block_size = kv_shape_.block_size;
  a.slots = Meta(layout_.slots);
  a.seq_q_start = Meta(layout_.seq_q_start);
  a.seq_num_tokens = Meta(layout_.seq_num_tokens);
  a.seq_start_pos = Meta(layout_.seq_start_pos);
  a.block_tables = Meta(layout_.block_tables);
  a.block_table_stride = block_table_stride_;
  a.decode_seqs = Meta(layout_.decode_seqs);
  a.decode_splits = Meta(layout_.decode_splits);
  a.decode_split_keys = Meta(layout_.decode_split_keys);
  a.n_decode = plan_.num_decode();
  a.max_splits = plan_.max_splits;
  a.prefill_tile_seq = Meta(layout_.prefill_tile_seq);
  a.prefill_tile_first = Meta(layout_.prefill_tile_first);
  a.n_prefill_tiles = plan_.num_prefill_tiles();
  a.prefill_tile_queries = cuda::AttentionPlanOptions().prefill_tile_queries;
  a.partials = partials_;
  a.out = Bf16(out);
  CUDA_RETURN_IF_ERROR(cuda::LaunchKvCacheWrite(a, stream_));
  CUDA_RETURN_IF_ERROR(cuda::LaunchPagedAttention(a, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::SwiGlu(const Tensor& gate_up, Tensor out) {
  RETURN_IF_ERROR(ExpectDType("SwiGlu gate_up", gate_up, DType::kF32));
  RETURN_IF_ERROR(ExpectDType("SwiGlu out", out, DType::kBF16));
  CUDA_RETURN_IF_ERROR(
      cuda::LaunchSwiGlu(F32(gate_up), gate_up.rows, out.cols, Bf16(out), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::GatherLogitRows(const Tensor& x, Tensor out) {
  RETURN_IF_ERROR(ExpectDType("GatherLogitRows x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectDType("GatherLogitRows out", out, DType::kF32));
  if (out.rows != num_logit_rows_) {
    return absl::InternalError("GatherLogitRows: output rows differ from the wanted rows");
  }
  CUDA_RETURN_IF_ERROR(cuda::LaunchGatherRows(F32(x), x.cols, Meta(layout_.logit_rows),
                                              num_logit_rows_, F32(out), stream_));
  return absl::OkStatus();
}

}  // namespace tpserve::engine
