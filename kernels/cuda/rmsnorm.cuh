// RMSNorm on the GPU, plain and fused with the residual add. One thread block per row and a
// fixed reduction order, so a row's result never depends on the other rows (batch-invariant).
// Sums of squares in f32. Stateless launchers.
#ifndef TPSERVE_KERNELS_CUDA_RMSNORM_CUH_
#define TPSERVE_KERNELS_CUDA_RMSNORM_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tpserve::cuda {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight.
// x: [m, d] f32; weight: [d] f32; out: [m, d] of OutT (float or __nv_bfloat16; may alias x
// when OutT is float).
template <typename OutT>
cudaError_t LaunchRmsNorm(const float* x, const float* weight, float eps, int64_t m, int64_t d,
                          OutT* out, cudaStream_t stream);

// residual[r, :] += x[r, :]; out[r, :] = rmsnorm(residual[r, :]) * weight.
// residual, x: [m, d] f32; weight: [d] f32; out: [m, d] of OutT.
template <typename OutT>
cudaError_t LaunchAddRmsNorm(float* residual, const float* x, const float* weight, float eps,
                             int64_t m, int64_t d, OutT* out, cudaStream_t stream);

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_RMSNORM_CUH_
