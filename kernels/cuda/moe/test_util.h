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
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device_buffer.h"

namespace weir::kernels::cuda::moe_test {

using ::weir::kernels::cuda::testing::DeviceBuffer;

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

// `size` draws of N(0, stddev^2) from `rng`.
inline std::vector<float> NormalVector(size_t size, float stddev, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(size);
  for (float& x : v) x = normal(rng);
  return v;
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
