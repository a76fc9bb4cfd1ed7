// Turning CUDA, cuBLAS and NCCL return codes into absl::Status with file:line.
// Header-only; thread-safe.
#ifndef TPSERVE_KERNELS_CUDA_CHECK_H_
#define TPSERVE_KERNELS_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublas_library.h"

namespace tpserve::cuda {

inline absl::Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, " failed: ",
                                          cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

inline absl::Status CublasStatus(cublasStatus_t err, const char* expr, const char* file, int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  // A failing call came through the library, so it is open.
  absl::StatusOr<const CublasLibrary*> lib = CublasLibrary::Get();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, " failed: ",
                                          lib.ok() ? (*lib)->status_name(err) : "cuBLAS status",
                                          " (", static_cast<int>(err), ")"));
}

inline absl::Status NcclStatus(ncclResult_t err, const char* expr, const char* file, int line) {
  if (err == ncclSuccess || err == ncclInProgress) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(file, ":", line, ": ", expr, " failed: ", ncclGetErrorString(err)));
}

}  // namespace tpserve::cuda

// Each returns a Status from the enclosing function when the call fails.
#define CUDA_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                \
    absl::Status _s = ::tpserve::cuda::CudaStatus((expr), #expr, __FILE__, __LINE__); \
    if (!_s.ok()) return _s;                                                          \
  } while (0)
#define CUBLAS_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                  \
    absl::Status _s = ::tpserve::cuda::CublasStatus((expr), #expr, __FILE__, __LINE__); \
    if (!_s.ok()) return _s;                                                            \
  } while (0)
#define NCCL_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                \
    absl::Status _s = ::tpserve::cuda::NcclStatus((expr), #expr, __FILE__, __LINE__); \
    if (!_s.ok()) return _s;                                                          \
  } while (0)

#endif  // TPSERVE_KERNELS_CUDA_CHECK_H_
