// Backend: the device one rank computes on. It owns device memory (weights, KV cache,
// activation workspace) and runs the ops of the Llama forward pass on Tensors in it.
// Implementations: CpuBackend (kernels/cpu: f32 activations, weights f32 or kept in their
// file's blocks) and CudaBackend (server/engine/cuda: bf16 weights, GEMM inputs and KV cache). The
// engine sees only this interface. Not thread-safe: one step at a time.
//
// Data types. Weight matrices are either a packed type the backend HoldsPacked() (the file's
// own blocks, held in the order the backend's kernels read them) or weight_dtype() (dequantised
// at load); norm weights are f32.
// GEMM inputs (the normed hidden state, attention output, SwiGLU output) and the KV cache are
// activation_dtype(). The residual stream and every GEMM output (QKV, the row-parallel partial
// sums that are all-reduced, gate/up, logits) are f32.
#ifndef TPSERVE_SERVER_ENGINE_BACKEND_H_
#define TPSERVE_SERVER_ENGINE_BACKEND_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/kv_block.h"
#include "server/engine/step_batch.h"
#include "server/engine/tensor.h"
#include "server/model/weights/model_config.h"

namespace tpserve::engine {

// Shape of the paged KV cache of one rank: per layer, K and V each
// [num_blocks, block_size, n_kv_heads, head_dim].
struct KvCacheShape {
  int64_t n_layers = 0;
  int64_t num_blocks = 0;
  int64_t block_size = kKvBlockSize;
  int64_t n_kv_heads = 0;  // the rank's KV heads
  int64_t head_dim = 0;
};

// RoPE settings the backend builds its tables from.
struct RopeSettings {
  int64_t head_dim = 0;
  double theta = 10000.0;
  model::RopeStyle style = model::RopeStyle::kInterleaved;
  model::RopeScaling scaling;
  int32_t max_position = 8192;  // positions whose cos/sin may be precomputed
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual DType activation_dtype() const = 0;
  // The type weights are dequantised to when not held packed.
  virtual DType weight_dtype() const = 0;
  // Whether weight matrices of `dtype` can be held and multiplied as they are (Matmul's w,
  // Embed's table).
  virtual bool HoldsPacked(DType dtype) const = 0;

  // Memory. Tensors stay valid until the backend is destroyed.
  virtual absl::StatusOr<Tensor> Allocate(int64_t rows, int64_t cols, DType dtype) = 0;
  // Uploads host [t.rows, t.cols] of `host_dtype` into `t`: copied when host_dtype is t.dtype
  // (packed types: the file's blocks, put in the backend's order for them), converted when the
  // backend can (f32 to bf16 on CUDA); InvalidArgument otherwise.
  virtual absl::Status Upload(const void* host, DType host_dtype, Tensor t) = 0;
  // Downloads `t` as f32 into host [t.rows, t.cols]; waits for every op enqueued before.
  virtual absl::Status Download(const Tensor& t, float* host) = 0;
  // Fills `t` with scale * u, u uniform in [-1, 1) from a hash of (seed, element index):
  // synthetic weights made where they live.
  virtual absl::Status FillRandom(Tensor t, uint64_t seed, float scale) = 0;
  // Bytes of device memory held for weights / KV cache / workspace.
  virtual int64_t allocated_bytes() const = 0;

  virtual absl::Status InitKvCache(const KvCacheShape& shape) = 0;
  virtual absl::Status InitRope(const RopeSettings& rope) = 0;

  // Makes the step's metadata (token ids, positions, block tables) available to the ops.
  virtual absl::Status BeginStep(const StepBatch& batch) = 0;

  // out[i, :] = table[token i of the step, :]. table: [vocab, d] weight dtype or held packed,
  // out: [m, d] f32.
  virtual absl::Status Embed(const Tensor& table, Tensor out) = 0;
  // out = rmsnorm(x) * weight. x: [m, d] f32; weight: [1, d] f32; out: [m, d] f32 or the
  // activation dtype (may be x itself when f32).
  virtual absl::Status RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) = 0;
  // residual += x; out = rmsnorm(residual) * weight. residual, x: f32; out as for RmsNorm.
  virtual absl::Status AddRmsNorm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                                  Tensor out) = 0;
  // y = x · wᵀ. x: [m, k] activation dtype, w: [n, k] weight dtype or held packed, y: [m, n]
  // f32.
  virtual absl::Status Matmul(const Tensor& x, const Tensor& w, Tensor y) = 0;
  // The canonical row-parallel product (kernels/cpu/quant/fixed_sum.h): sums = the exact
  // fixed-point sums of x · wᵀ over granules of `granule` blocks of 32 values, which any split
  // of k on granule boundaries, added as integers in any order, reproduces bit for bit. x as
  // Matmul's; w: [n, k] held packed in a type SumsExactly() takes; sums: [m, n] int64. The
  // defaults: a backend without it.
  virtual bool SumsExactly(DType /*w*/) const { return false; }
  virtual absl::Status MatmulExact(const Tensor& /*x*/, const Tensor& /*w*/, int64_t /*granule*/,
                                   Tensor /*sums*/) {
    return absl::UnimplementedError("this backend has no exact row-parallel sums");
  }
  // y = the floats of sums. sums: [m, n] int64; y: [m, n] f32.
  virtual absl::Status FixedToFloat(const Tensor& /*sums*/, Tensor /*y*/) {
    return absl::UnimplementedError("this backend has no exact row-parallel sums");
  }
  // y += x, both f32.
  virtual absl::Status Add(Tensor y, const Tensor& x) = 0;
  // RoPE in place on the q and k parts of qkv: [m, (n_q + 2 * n_kv) * head_dim] f32, each
  // token at its step position.
  virtual absl::Status Rope(Tensor qkv, int64_t n_q_heads, int64_t n_kv_heads) = 0;
  // Writes the step's k, v (from qkv) into layer `layer`'s cache and computes causal GQA
  // attention of the step's queries. qkv: [m, (n_q + 2 n_kv) * head_dim] f32,
  // out: [m, n_q * hd] activation dtype.
  virtual absl::Status Attention(int64_t layer, const Tensor& qkv, int64_t n_q_heads,
                                 int64_t n_kv_heads, Tensor out) = 0;
  // out = silu(gate) * up; gate_up: [m, 2f] f32 (gate columns first), out: [m, f] activation
  // dtype.
  virtual absl::Status SwiGlu(const Tensor& gate_up, Tensor out) = 0;
  // out[j, :] = x[j-th row whose logits the step wants (StepSequence::num_logit_rows), :];
  // x, out f32.
  virtual absl::Status GatherLogitRows(const Tensor& x, Tensor out) = 0;
};

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_BACKEND_H_
