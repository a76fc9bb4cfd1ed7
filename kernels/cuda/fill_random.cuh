// Deterministic pseudo-random fill on the GPU, for synthetic models made on the device (the
// decode benchmark): value i = scale * u(seed, i) rounded to T, u uniform in [-1, 1) from a
// counter-based hash, so the same (seed, i) gives the same value on any launch shape. Stateless
// launcher.
#ifndef TPSERVE_KERNELS_CUDA_FILL_RANDOM_CUH_
#define TPSERVE_KERNELS_CUDA_FILL_RANDOM_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tpserve::cuda {

// data: [n] of T (float or __nv_bfloat16).
template <typename T>
cudaError_t LaunchFillRandom(T* data, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_FILL_RANDOM_CUH_
