#include "kernels/cuda/gather_rows.cuh"

#include "kernels/cuda/launch.cuh"

namespace tpserve::cuda {
namespace {

// One block per output row (grid-stride over rows); the block's threads stride over the columns.
// x: [*, cols]; rows: [n_rows]; out: [n_rows, cols].
__global__ void GatherRowsKernel(const float* __restrict__ x, int64_t cols,
                                 const int32_t* __restrict__ rows, int64_t n_rows,
                                 float* __restrict__ out) {
  for (int64_t j = blockIdx.x; j < n_rows; j += gridDim.x) {
    const float* src = x + static_cast<int64_t>(rows[j]) * cols;  // [cols]
    float* dst = out + j * cols;                                  // [cols]
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
  }
}

}  // namespace

cudaError_t LaunchGatherRows(const float* x, int64_t cols, const int32_t* rows, int64_t n_rows,
                             float* out, cudaStream_t stream) {
  if (cols < 0 || n_rows < 0) return cudaErrorInvalidValue;
  if (cols == 0 || n_rows == 0) return cudaSuccess;
  GatherRowsKernel<<<launch::RowBlocks(n_rows), launch::kThreads, 0, stream>>>(x, cols, rows,
                                                                               n_rows, out);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
