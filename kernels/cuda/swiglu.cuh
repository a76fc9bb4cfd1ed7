// SwiGLU on the GPU: out = silu(gate) * up, computed in f32, stored as bf16 (the next GEMM's
// input). Stateless launcher.
#ifndef TPSERVE_KERNELS_CUDA_SWIGLU_CUH_
#define TPSERVE_KERNELS_CUDA_SWIGLU_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tpserve::cuda {

// gate_up: [m, 2f] f32, gate columns [0, f), up columns [f, 2f); out: [m, f] bf16.
cudaError_t LaunchSwiGlu(const float* gate_up, int64_t m, int64_t f, __nv_bfloat16* out,
                         cudaStream_t stream);

}  // namespace tpserve::cuda

#endif  // TPSERVE_KERNELS_CUDA_SWIGLU_CUH_
