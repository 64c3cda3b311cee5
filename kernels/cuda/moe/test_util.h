// kernels/cuda/moe/test_util.h — device buffers and error measures for the
// GPU-vs-CPU tests of this package (testonly).
//
// Thread safety: DeviceBuffer is not thread-safe; the functions are pure.

#ifndef WEIR_KERNELS_CUDA_MOE_TEST_UTIL_H_
#define WEIR_KERNELS_CUDA_MOE_TEST_UTIL_H_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cuda::moe_test {

// A plain cudaMalloc'ed array of T, freed on destruction. CUDA failures fail
// the current test (ADD_FAILURE) and leave the buffer null.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n == 0) return;
    if (cudaError_t e = cudaMalloc(&ptr_, n * sizeof(T)); e != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc " << n * sizeof(T) << ": " << cudaGetErrorString(e);
      ptr_ = nullptr;
    }
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }

  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), n_);
    if (n_ == 0) return;
    ASSERT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  // Fills every byte with 0xFF (NaN for floats, -1 for integers).
  void Poison() {
    if (n_ > 0) {
      ASSERT_EQ(cudaMemset(ptr_, 0xFF, n_ * sizeof(T)), cudaSuccess);
    }
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return host;
  }

 private:
  size_t n_ = 0;
  T* ptr_ = nullptr;
};

// ||a - b|| / ||b|| in double; infinity if any element of `a` is not finite
// while the same element of `b` is.
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isfinite(b[i]) && !std::isfinite(a[i])) return INFINITY;
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline double MaxAbsError(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::fmax(m, std::fabs(double(a[i]) - double(b[i])));
  }
  return m;
}

// Number of positions whose fp32 bit patterns differ (NaN == NaN).
inline int64_t BitMismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    n += x != y;
  }
  return n + static_cast<int64_t>(a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

// Waits for the device and reports the first pending error.
inline ::testing::AssertionResult Synced() {
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    return ::testing::AssertionFailure() << "CUDA: " << cudaGetErrorString(e);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace weir::kernels::cuda::moe_test

#endif  // WEIR_KERNELS_CUDA_MOE_TEST_UTIL_H_
