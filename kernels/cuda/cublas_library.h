// CublasLibrary: cuBLAS opened with dlopen on first use instead of being linked.
//
// Why: libcublasLt carries 94 KiB of thread-local storage. A library linked into the program
// is loaded at start-up, and glibc then reserves its TLS at the top of every thread's stack;
// a thread asking for a small stack cannot start at all (pthread_create: EINVAL). CivetWeb,
// which serves /metrics, asks for 100 KiB, so a CUDA build that linked cuBLAS could not serve
// metrics even on a CPU worker. Opened later, the library's TLS is allocated per thread on
// first use instead. Only the entry points tpserve calls are resolved. Thread-safe.
#ifndef TPSERVE_KERNELS_CUDA_CUBLAS_LIBRARY_H_
#define TPSERVE_KERNELS_CUDA_CUBLAS_LIBRARY_H_

#include <cublas_v2.h>

#include <string>

#include "absl/status/statusor.h"

namespace tpserve::cuda {

struct CublasLibrary {
  // The process-wide library, opened and resolved on the first call. FailedPrecondition
  // naming the library file and dlerror() when it cannot be opened or lacks an entry point;
  // the same error on every later call.
  static absl::StatusOr<const CublasLibrary*> Get();

  // The file opened: libcublas.so.<major> of the toolkit the headers came from.
  static std::string FileName();

  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasGetStream_v2) get_stream = nullptr;
  decltype(&::cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&::cublasSetPointerMode_v2) set_pointer_mode = nullptr;
  // cublasGemmEx is overloaded (a C++ wrapper takes a cudaDataType compute type): the C one.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m,
                                    int n, int k, const void* alpha, const void* a, cudaDataType,
                                    int lda, const void* b, cudaDataType, int ldb, const void* beta,
                                    void* c, cudaDataType, int ldc, cublasComputeType_t,
                                    cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
  decltype(&::cublasGetProperty) get_property = nullptr;
  decltype(&::cublasGetStatusName) status_name = nullptr;
};

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_CUBLAS_LIBRARY_H_
