#include "kernels/cuda/device_info.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <library_types.h>
#include <nccl.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cublas_library.h"

namespace tpserve::cuda {

absl::StatusOr<LibraryVersions> QueryLibraryVersions() {
  LibraryVersions v;
  CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&v.cuda_runtime));
  absl::StatusOr<const CublasLibrary*> opened = CublasLibrary::Get();
  if (!opened.ok()) return opened.status();
  const CublasLibrary& cublas = **opened;
  int major = 0, minor = 0, patch = 0;
  CUBLAS_RETURN_IF_ERROR(cublas.get_property(MAJOR_VERSION, &major));
  CUBLAS_RETURN_IF_ERROR(cublas.get_property(MINOR_VERSION, &minor));
  CUBLAS_RETURN_IF_ERROR(cublas.get_property(PATCH_LEVEL, &patch));
  v.cublas = major * 10000 + minor * 100 + patch;
  NCCL_RETURN_IF_ERROR(ncclGetVersion(&v.nccl));
  return v;
}

absl::StatusOr<std::vector<GpuInfo>> ListGpus() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return std::vector<GpuInfo>{};
  }
  CUDA_RETURN_IF_ERROR(err);
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, i));
    gpus.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem});
  }
  return gpus;
}

}  // namespace tpserve::cuda
