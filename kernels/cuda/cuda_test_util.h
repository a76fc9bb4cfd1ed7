// Helpers for the CUDA kernel tests: skip without a GPU, device buffers with host copies, bf16
// rounding of host data. Test-only; not thread-safe.
#ifndef TPSERVE_KERNELS_CUDA_CUDA_TEST_UTIL_H_
#define TPSERVE_KERNELS_CUDA_CUDA_TEST_UTIL_H_

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/bf16_host.h"

namespace tpserve::cuda::testing {

// Number of GPUs the driver shows; 0 (and the error cleared) when there is no GPU or driver.
inline int VisibleGpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

// Skips the test, with the reason printed, when no GPU is visible.
#define TPSERVE_SKIP_WITHOUT_GPU()                                                       \
  do {                                                                                   \
    if (::tpserve::cuda::testing::VisibleGpus() == 0) {                                  \
      GTEST_SKIP() << "no GPU visible to the CUDA driver: CUDA kernels cannot run here"; \
    }                                                                                    \
  } while (0)

// A device array of T with its size; freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t size) : size_(size) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(1, size) * sizeof(T)), cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), size_);
    ASSERT_EQ(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    // A copy from pageable memory may return before its data has landed, and the legacy
    // stream it ran on does not order work on the non-blocking streams the code under test
    // uses: wait for it here.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the work on every stream, done
    EXPECT_EQ(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  size_t size_;
  T* data_ = nullptr;
};

// n uniform values in [-scale, scale) from a fixed seed.
inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The bf16 bits of `v` and, in place, `v` rounded to what bf16 holds (the reference then sees
// exactly the GPU's inputs).
inline std::vector<uint16_t> RoundToBf16(std::vector<float>* v) {
  std::vector<uint16_t> bits(v->size());
  FloatsToBf16(v->data(), static_cast<int64_t>(v->size()), bits.data());
  Bf16ToFloats(bits.data(), static_cast<int64_t>(bits.size()), v->data());
  return bits;
}

inline std::vector<float> Bf16ToFloats(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  ::tpserve::cuda::Bf16ToFloats(bits.data(), static_cast<int64_t>(bits.size()), v.data());
  return v;
}

}  // namespace tpserve::cuda::testing

#endif  // TPSERVE_KERNELS_CUDA_CUDA_TEST_UTIL_H_
