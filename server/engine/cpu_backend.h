// CpuBackend: the Backend of CPU workers: f32 activations and paged KV cache in host memory,
// weights f32 or held packed in their file's blocks (F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K,
// Q6_K; kernels/cpu/quant, on machines with AVX2, FMA and F16C; Q8_0 rows interleaved 8 at a
// time for its tiles, kernels/cpu/quant/weight_layout.h), ops from kernels/cpu on a
// fixed ThreadPool. Not thread-safe (one step at a
// time), like every Backend.
#ifndef TPSERVE_SERVER_ENGINE_CPU_BACKEND_H_
#define TPSERVE_SERVER_ENGINE_CPU_BACKEND_H_

#include <memory>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/quant/quant_matmul.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/thread_pool.h"
#include "server/engine/backend.h"

namespace tpserve::engine {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int num_threads);
  ~CpuBackend() override;

  std::string_view name() const override { return "cpu"; }
  DType activation_dtype() const override { return DType::kF32; }
  DType weight_dtype() const override { return DType::kF32; }
  bool HoldsPacked(DType dtype) const override;

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
  bool SumsExactly(DType w) const override;
  absl::Status MatmulExact(const Tensor& x, const Tensor& w, int64_t granule, Tensor sums) override;
  absl::Status FixedToFloat(const Tensor& sums, Tensor y) override;
  absl::Status Add(Tensor y, const Tensor& x) override;
  absl::Status Rope(Tensor qkv, int64_t n_q_heads, int64_t n_kv_heads) override;
  absl::Status Attention(int64_t layer, const Tensor& qkv, int64_t n_q_heads, int64_t n_kv_heads,
                         Tensor out) override;
  absl::Status SwiGlu(const Tensor& gate_up, Tensor out) override;
  absl::Status GatherLogitRows(const Tensor& x, Tensor out) override;

 private:
  kernels::cpu::ThreadPool pool_;
  std::vector<std::unique_ptr<float[]>> buffers_;  // every allocation, freed with the backend
  int64_t allocated_bytes_ = 0;

  KvCacheShape kv_shape_;
  std::vector<kernels::cpu::PagedKvCache> kv_layers_;  // [n_layers]
  std::unique_ptr<kernels::cpu::RopeTable> rope_;

  // The current step's metadata.
  std::vector<int32_t> tokens_;          // [m]
  std::vector<int32_t> positions_;       // [m]
  std::vector<int32_t> logit_rows_;      // rows whose logits are wanted
  std::vector<StepSequence> sequences_;  // block tables of the step (tokens unused)
  std::vector<int64_t> seq_offsets_;     // first row of each sequence
  std::vector<float> k_scratch_, v_scratch_, q_scratch_;  // [m, n_kv*hd], [m, n_q*hd]
  kernels::cpu::QuantScratch q8_scratch_;                 // Matmul's quantised x
};

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_CPU_BACKEND_H_
