#include "kernels/cuda/fill.h"

#include <cuda_runtime.h>

#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cuda {
namespace {

TEST(FillF32Test, FillsEveryElementAcrossGridStride) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no usable CUDA device";
  ASSERT_GT(devices, 0);
  // Larger than one grid of 65535 x 256 threads, so the stride loop runs.
  const int64_t n = 65535LL * 256 + 1000;
  float* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(buffer, 0xFF, n * sizeof(float)), cudaSuccess);  // Poison (NaN).
  ASSERT_TRUE(FillF32({.out = buffer, .n = n, .value = 2.5f}, nullptr).ok());
  std::vector<float> host(n);
  ASSERT_EQ(cudaMemcpy(host.data(), buffer, n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(host[i], 2.5f) << i;
  cudaFree(buffer);
}

TEST(FillF32Test, RejectsBadParamsBeforeLaunch) {
  EXPECT_EQ(FillF32({.out = nullptr, .n = 4}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FillF32({.out = nullptr, .n = -1}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(FillF32({.out = nullptr, .n = 0}, nullptr).ok());
}

}  // namespace
}  // namespace weir::kernels::cuda
