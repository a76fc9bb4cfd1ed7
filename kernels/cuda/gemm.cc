#include "kernels/cuda/gemm.h"

#include <climits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"

namespace tpserve::cuda {
namespace {

// What the cuBLAS documentation recommends for Hopper (Ampere needs 4 MiB); 256-byte aligned by
// cudaMalloc as cuBLAS requires.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create(cudaStream_t stream) {
  absl::StatusOr<const CublasLibrary*> opened = CublasLibrary::Get();
  if (!opened.ok()) return opened.status();
  const CublasLibrary& cublas = **opened;
  cublasHandle_t handle = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublas.create(&handle));
  // From here the Gemm owns the handle (and the workspace once allocated): early returns free them.
  std::unique_ptr<Gemm> gemm(new Gemm(&cublas, handle));
  void* workspace = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace, kWorkspaceBytes));
  gemm->workspace_ = workspace;
  CUBLAS_RETURN_IF_ERROR(cublas.set_stream(handle, stream));
  // cublasSetStream resets the handle to cuBLAS's default workspace pool, so ours comes after it.
  CUBLAS_RETURN_IF_ERROR(cublas.set_workspace(handle, workspace, kWorkspaceBytes));
  // alpha and beta are host values.
  CUBLAS_RETURN_IF_ERROR(cublas.set_pointer_mode(handle, CUBLAS_POINTER_MODE_HOST));
  return gemm;
}

Gemm::~Gemm() {
  // A destructor cannot report errors; both calls only fail when the context is already gone.
  // cublasDestroy waits for the handle's pending work, so the workspace is idle when freed.
  if (handle_ != nullptr) (void)cublas_->destroy(handle_);
  if (workspace_ != nullptr) (void)cudaFree(workspace_);
}

absl::Status Gemm::Run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t m,
                       int64_t n, int64_t k) {
  if (m < 0 || n < 0 || k < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: sizes m=", m, " n=", n, " k=", k, " outside [0, INT_MAX]"));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {  // an empty sum: y = 0
    cudaStream_t stream = nullptr;
    CUBLAS_RETURN_IF_ERROR(cublas_->get_stream(handle_, &stream));
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
        y, 0, static_cast<size_t>(m) * static_cast<size_t>(n) * sizeof(float), stream));
    return absl::OkStatus();
  }
  // cuBLAS is column-major, and a row-major [r, c] buffer read column-major is its transpose
  // [c, r]. So y[m, n] row-major is the column-major yᵀ: [n, m] (ld n), and
  //   yᵀ = (x · wᵀ)ᵀ = w · xᵀ:
  //   A = w's buffer, column-major [k, n] (ld k) = wᵀ, so op(A) = T gives w: [n, k];
  //   B = x's buffer, column-major [k, m] (ld k) = xᵀ already, so op(B) = N;
  //   C = y's buffer, column-major [n, m] (ld n); cuBLAS (M, N, K) = (n, m, k).
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const int mi = static_cast<int>(m);
  const int ni = static_cast<int>(n);
  const int ki = static_cast<int>(k);
  CUBLAS_RETURN_IF_ERROR(cublas_->gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, ni, mi, ki, &alpha, w,
                                          CUDA_R_16BF, ki, x, CUDA_R_16BF, ki, &beta, y, CUDA_R_32F,
                                          ni, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace tpserve::cuda
