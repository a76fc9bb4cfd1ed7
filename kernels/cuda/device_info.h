// DeviceInfo: what the CUDA runtime, cuBLAS and NCCL linked into tpserve report about
// themselves and about the GPUs present. Pure queries; thread-safe.
#ifndef TPSERVE_KERNELS_CUDA_DEVICE_INFO_H_
#define TPSERVE_KERNELS_CUDA_DEVICE_INFO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve::cuda {

struct GpuInfo {
  int ordinal = 0;
  std::string name;
  int sm_major = 0;
  int sm_minor = 0;
  size_t total_memory_bytes = 0;
};

struct LibraryVersions {
  int cuda_runtime = 0;  // e.g. 13000
  int cublas = 0;        // e.g. 130000
  int nccl = 0;          // e.g. 22703
};

// Versions of the linked libraries; needs no GPU.
absl::StatusOr<LibraryVersions> QueryLibraryVersions();

// Every visible GPU; an empty list (not an error) when the driver sees none.
absl::StatusOr<std::vector<GpuInfo>> ListGpus();

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_DEVICE_INFO_H_
