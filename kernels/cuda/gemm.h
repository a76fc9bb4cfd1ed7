// Gemm: y = x · wᵀ on the GPU through cuBLAS, bf16 inputs with f32 accumulation and an f32
// result (the layout of every linear layer: x [m, k] activations, w [n, k] weights row-major,
// y [m, n]). cuBLAS is opened on first use (CublasLibrary). Owns one cuBLAS handle bound to a
// stream and its workspace. Not thread-safe.
#ifndef TPSERVE_KERNELS_CUDA_GEMM_H_
#define TPSERVE_KERNELS_CUDA_GEMM_H_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cuda/cublas_library.h"

namespace tpserve::cuda {

class Gemm {
 public:
  // A handle on the current device whose work is enqueued on `stream`.
  static absl::StatusOr<std::unique_ptr<Gemm>> Create(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y = x · wᵀ. x: [m, k] bf16, w: [n, k] bf16, y: [m, n] f32 (all row-major, device).
  absl::Status Run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t m, int64_t n,
                   int64_t k);

 private:
  Gemm(const CublasLibrary* cublas, cublasHandle_t handle) : cublas_(cublas), handle_(handle) {}
  const CublasLibrary* cublas_;  // the process's cuBLAS, opened on first use
  cublasHandle_t handle_;
  void* workspace_ = nullptr;  // cuBLAS workspace, owned
};

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_GEMM_H_
