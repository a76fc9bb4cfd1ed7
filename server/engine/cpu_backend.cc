#include "server/engine/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/add.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/hash_uniform.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant/quant_matmul.h"
#include "kernels/cpu/quant/weight_layout.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/swiglu.h"
#include "server/engine/rope_params.h"

namespace tpserve::engine {
namespace {

namespace k = ::tpserve::kernels::cpu;

float* F32(const Tensor& t) { return static_cast<float*>(t.data); }

absl::Status ExpectShape(const char* what, const Tensor& t, int64_t rows, int64_t cols) {
  if (t.rows != rows || t.cols != cols) {
    return absl::InternalError(absl::StrCat(what, ": expected [", rows, ", ", cols, "], got [",
                                            t.rows, ", ", t.cols, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

CpuBackend::CpuBackend(int num_threads) : pool_(std::max(1, num_threads)) {}
CpuBackend::~CpuBackend() = default;

bool CpuBackend::HoldsPacked(DType dtype) const {
  return dtype != DType::kF32 && dtype != DType::kI64 && k::CpuSupportsQuantKernels();
}

absl::StatusOr<Tensor> CpuBackend::Allocate(int64_t rows, int64_t cols, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kI64 && !HoldsPacked(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CPU backend cannot hold ", DTypeName(dtype), " tensors"));
  }
  if (rows < 0 || cols < 0 || cols % DTypeBlockValues(dtype) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad ", DTypeName(dtype), " tensor shape [", rows, ", ", cols, "]"));
  }
  // Packed weights in the kernels' layout (weight_layout.h): the file's bytes, reordered.
  const int64_t bytes = dtype == DType::kF32   ? rows * cols * 4
                        : dtype == DType::kI64 ? rows * cols * 8
                                               : k::LayoutBytes(FormatOf(dtype), rows, cols);
  const int64_t n = std::max<int64_t>(1, (bytes + 3) / 4);
  // Value-initialised: fresh KV blocks and workspaces read as zeros, never garbage.
  std::unique_ptr<float[]> buffer(new (std::nothrow) float[n]());
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", n * sizeof(float),
                                                     " bytes for a ", DTypeName(dtype), " tensor [",
                                                     rows, ", ", cols, "]"));
  }
  buffers_.push_back(std::move(buffer));
  allocated_bytes_ += n * static_cast<int64_t>(sizeof(float));
  return Tensor{buffers_.back().get(), rows, cols, dtype};
}

absl::Status CpuBackend::Upload(const void* host, DType host_dtype, Tensor t) {
  if (host_dtype != t.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("the CPU backend does not convert ",
                                                   DTypeName(host_dtype), " to ",
                                                   DTypeName(t.dtype), " on upload"));
  }
  if (t.dtype == DType::kF32) {
    std::memcpy(t.data, host, t.bytes());
  } else {
    k::ToLayout(FormatOf(t.dtype), static_cast<const uint8_t*>(host), t.rows, t.cols,
                static_cast<uint8_t*>(t.data));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Download(const Tensor& t, float* host) {
  if (t.dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("Download: ", DTypeName(t.dtype), " tensors are not downloaded as f32"));
  }
  std::memcpy(host, t.data, t.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::FillRandom(Tensor t, uint64_t seed, float scale) {
  if (t.dtype != DType::kF32) {
    return absl::InvalidArgumentError("FillRandom makes f32 tensors only");
  }
  float* data = F32(t);
  for (int64_t i = 0; i < t.elements(); ++i) {
    data[i] = scale * kernels::HashUniform(seed, static_cast<uint64_t>(i));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::InitKvCache(const KvCacheShape& shape) {
  kv_shape_ = shape;
  kv_layers_.clear();
  const int64_t per_layer = shape.num_blocks * shape.block_size * shape.n_kv_heads * shape.head_dim;
  for (int64_t l = 0; l < shape.n_layers; ++l) {
    auto k_cache = Allocate(per_layer, 1, DType::kF32);
    if (!k_cache.ok()) return k_cache.status();
    auto v_cache = Allocate(per_layer, 1, DType::kF32);
    if (!v_cache.ok()) return v_cache.status();
    k::PagedKvCache c;
    c.k = F32(*k_cache);
    c.v = F32(*v_cache);
    c.num_blocks = shape.num_blocks;
    c.block_size = shape.block_size;
    c.n_kv_heads = shape.n_kv_heads;
    c.head_dim = shape.head_dim;
    kv_layers_.push_back(c);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::InitRope(const RopeSettings& rope) {
  rope_ = std::make_unique<k::RopeTable>(ToRopeParams(rope));
  return absl::OkStatus();
}

absl::Status CpuBackend::BeginStep(const StepBatch& batch) {
  tokens_.clear();
  positions_.clear();
  logit_rows_.clear();
  seq_offsets_.clear();
  sequences_.resize(batch.sequences.size());
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const StepSequence& seq = batch.sequences[s];  // within limits: ValidateStep
    seq_offsets_.push_back(static_cast<int64_t>(tokens_.size()));
    for (size_t i = 0; i < seq.tokens.size(); ++i) {
      tokens_.push_back(seq.tokens[i]);
      positions_.push_back(seq.start_pos + static_cast<int32_t>(i));
    }
    const auto end = static_cast<int32_t>(tokens_.size());
    for (int64_t r = end - seq.num_logit_rows(); r < end; ++r) {
      logit_rows_.push_back(static_cast<int32_t>(r));
    }
    sequences_[s].start_pos = seq.start_pos;
    sequences_[s].block_table = seq.block_table;
    sequences_[s].tokens.resize(seq.tokens.size());
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Embed(const Tensor& table, Tensor out) {
  const auto m = static_cast<int64_t>(tokens_.size());
  if (absl::Status s = ExpectShape("Embed out", out, m, table.cols); !s.ok()) return s;
  if (table.dtype == DType::kF32) {
    k::GatherRows(F32(table), table.rows, tokens_.data(), m, table.cols, F32(out));
    return absl::OkStatus();
  }
  // A packed table: each wanted row decoded from its blocks.
  const auto* rows = static_cast<const uint8_t*>(table.data);
  for (int64_t i = 0; i < m; ++i) {
    k::DequantizeLayoutRows(FormatOf(table.dtype), rows, table.cols, tokens_[i], tokens_[i] + 1,
                            F32(out) + i * table.cols);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) {
  k::RmsNorm(F32(x), F32(weight), eps, F32(out), x.rows, x.cols, &pool_);
  return absl::OkStatus();
}

absl::Status CpuBackend::AddRmsNorm(Tensor residual, const Tensor& x, const Tensor& weight,
                                    float eps, Tensor out) {
  k::AddRmsNorm(F32(residual), F32(x), F32(weight), eps, F32(out), x.rows, x.cols, &pool_);
  return absl::OkStatus();
}

absl::Status CpuBackend::Matmul(const Tensor& x, const Tensor& w, Tensor y) {
  if (x.cols != w.cols || y.rows != x.rows || y.cols != w.rows) {
    return absl::InternalError(absl::StrCat("Matmul shapes: x [", x.rows, ", ", x.cols, "] w [",
                                            w.rows, ", ", w.cols, "] y [", y.rows, ", ", y.cols,
                                            "]"));
  }
  if (w.dtype == DType::kF32) {
    k::MatmulF32(F32(x), F32(w), F32(y), x.rows, w.rows, x.cols, &pool_);
  } else {
    k::QuantMatmul(FormatOf(w.dtype), F32(x), static_cast<const uint8_t*>(w.data), F32(y), x.rows,
                   w.rows, x.cols, &pool_, &q8_scratch_);
  }
  return absl::OkStatus();
}

bool CpuBackend::SumsExactly(DType w) const {
  return HoldsPacked(w) && k::HasFixedSums(FormatOf(w));
}

absl::Status CpuBackend::MatmulExact(const Tensor& x, const Tensor& w, int64_t granule,
                                     Tensor sums) {
  if (x.cols != w.cols || sums.rows != x.rows || sums.cols != w.rows || sums.dtype != DType::kI64 ||
      !SumsExactly(w.dtype) || granule < 1 || x.cols % (32 * granule) != 0) {
    return absl::InternalError(absl::StrCat("MatmulExact: x [", x.rows, ", ", x.cols, "] w ",
                                            DTypeName(w.dtype), " [", w.rows, ", ", w.cols,
                                            "] sums ", DTypeName(sums.dtype), " [", sums.rows, ", ",
                                            sums.cols, "] granule ", granule));
  }
  k::QuantMatmulFixed(FormatOf(w.dtype), F32(x), static_cast<const uint8_t*>(w.data),
                      static_cast<int64_t*>(sums.data), x.rows, w.rows, x.cols, granule, &pool_,
                      &q8_scratch_);
  return absl::OkStatus();
}

absl::Status CpuBackend::FixedToFloat(const Tensor& sums, Tensor y) {
  if (sums.dtype != DType::kI64 || y.rows != sums.rows || y.cols != sums.cols) {
    return absl::InternalError("FixedToFloat: shapes or types differ");
  }
  k::FixedToFloat(static_cast<const int64_t*>(sums.data), sums.elements(), F32(y));
  return absl::OkStatus();
}

absl::Status CpuBackend::Add(Tensor y, const Tensor& x) {
  k::Add(F32(y), F32(x), y.elements());
  return absl::OkStatus();
}

absl::Status CpuBackend::Rope(Tensor qkv, int64_t n_q_heads, int64_t n_kv_heads) {
  const int64_t hd = kv_shape_.head_dim;
  // q: the first n_q_heads heads of each row; k: the next n_kv_heads.
  k::ApplyRope(*rope_, F32(qkv), qkv.cols, positions_.data(), qkv.rows, n_q_heads, &pool_);
  k::ApplyRope(*rope_, F32(qkv) + n_q_heads * hd, qkv.cols, positions_.data(), qkv.rows, n_kv_heads,
               &pool_);
  return absl::OkStatus();
}

absl::Status CpuBackend::Attention(int64_t layer, const Tensor& qkv, int64_t n_q_heads,
                                   int64_t n_kv_heads, Tensor out) {
  const int64_t hd = kv_shape_.head_dim;
  const int64_t m = qkv.rows;
  const int64_t q_width = n_q_heads * hd;    // q: [m, n_q * hd]
  const int64_t kv_width = n_kv_heads * hd;  // k, v: [m, n_kv * hd]
  q_scratch_.resize(m * q_width);
  k_scratch_.resize(m * kv_width);
  v_scratch_.resize(m * kv_width);
  const float* src = F32(qkv);
  for (int64_t r = 0; r < m; ++r) {
    const float* row = src + r * qkv.cols;
    std::memcpy(&q_scratch_[r * q_width], row, q_width * sizeof(float));
    std::memcpy(&k_scratch_[r * kv_width], row + q_width, kv_width * sizeof(float));
    std::memcpy(&v_scratch_[r * kv_width], row + q_width + kv_width, kv_width * sizeof(float));
  }
  const k::PagedKvCache& cache = kv_layers_[layer];
  std::vector<k::AttentionSequence> seqs(sequences_.size());
  for (size_t s = 0; s < sequences_.size(); ++s) {
    const StepSequence& seq = sequences_[s];
    const int64_t t = static_cast<int64_t>(seq.tokens.size());
    const int64_t off = seq_offsets_[s];
    k::KvCacheWrite(&k_scratch_[off * kv_width], &v_scratch_[off * kv_width],
                    seq.block_table.data(), static_cast<int64_t>(seq.block_table.size()),
                    seq.start_pos, t, cache);
    seqs[s] = {t, seq.start_pos, seq.block_table.data(),
               static_cast<int64_t>(seq.block_table.size())};
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  k::PagedAttentionBatch(q_scratch_.data(), seqs.data(), static_cast<int64_t>(seqs.size()), cache,
                         n_q_heads, scale, F32(out), &pool_);
  return absl::OkStatus();
}

absl::Status CpuBackend::SwiGlu(const Tensor& gate_up, Tensor out) {
  k::SwiGlu(F32(gate_up), F32(out), gate_up.rows, out.cols, &pool_);
  return absl::OkStatus();
}

absl::Status CpuBackend::GatherLogitRows(const Tensor& x, Tensor out) {
  if (out.rows != static_cast<int64_t>(logit_rows_.size())) {
    return absl::InternalError("GatherLogitRows: output rows differ from the wanted rows");
  }
  for (size_t j = 0; j < logit_rows_.size(); ++j) {
    std::memcpy(F32(out) + j * x.cols, F32(x) + logit_rows_[j] * x.cols, x.cols * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace tpserve::engine
