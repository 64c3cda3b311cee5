// kernels/cuda/dense/test_util.h
//
// Test helpers of this package: an owning device buffer filled from and read
// back to host vectors, and the relative error ||a - b|| / ||b||.
//
// Thread safety: DeviceBuffer is not thread-safe; functions are pure.

#ifndef WEIR_KERNELS_CUDA_DENSE_TEST_UTIL_H_
#define WEIR_KERNELS_CUDA_DENSE_TEST_UTIL_H_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace weir::kernels::cuda::dense {

// cudaMalloc'd storage of `n` elements of T, freed on destruction. ok() is
// false when the allocation failed.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int64_t n) : n_(n) {
    if (cudaMalloc(&data_, static_cast<size_t>(n) * sizeof(T)) != cudaSuccess) data_ = nullptr;
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (data_ != nullptr) {
      cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  bool ok() const { return data_ != nullptr; }
  T* get() const { return data_; }
  // Fills every byte with `byte` (poison before a kernel writes).
  void Poison(int byte) { cudaMemset(data_, byte, static_cast<size_t>(n_) * sizeof(T)); }
  std::vector<T> ToHost() const {
    std::vector<T> host(n_);
    cudaMemcpy(host.data(), data_, host.size() * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  T* data_ = nullptr;
  int64_t n_;
};

// Returns ||a - b|| / ||b|| (0 when both are zero).
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Returns the number of positions whose float bits differ (a NaN matches any
// NaN), and the first such index in *first (-1 if none).
inline int64_t BitMismatches(const std::vector<float>& a, const std::vector<float>& b,
                             int64_t* first) {
  int64_t count = 0;
  *first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || ua == ub;
    if (!same) {
      if (*first < 0) *first = static_cast<int64_t>(i);
      ++count;
    }
  }
  return count + static_cast<int64_t>(a.size() > b.size() ? a.size() - b.size()
                                                            : b.size() - a.size());
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_TEST_UTIL_H_
