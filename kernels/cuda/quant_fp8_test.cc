#include "kernels/cuda/quant_fp8.h"

#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/quant.h"

namespace weir::kernels::cuda {
namespace {

TEST(QuantizeFp8CudaTest, BitIdenticalToTheCpuReference) {
  constexpr int64_t kBlocks = 20000;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 40);
  std::vector<float> x(kBlocks * 32);
  for (int64_t b = 0; b < kBlocks; ++b) {
    // Every block its own magnitude, from tiny (amax floor) to huge.
    const float scale = std::ldexp(1.0f, exponent(rng));
    for (int i = 0; i < 32; ++i) x[b * 32 + i] = normal(rng) * scale;
  }
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;                                 // all zero
  x[32 * 5 + 3] = std::numeric_limits<float>::quiet_NaN();                  // NaN block
  x[32 * 6 + 9] = -std::numeric_limits<float>::infinity();                  // Inf block
  for (int i = 0; i < 32; ++i) x[32 * 7 + i] = i % 2 ? 448.0f : -1e30f;     // saturation
  x[32 * 8] = 1e-42f;                                                       // denormal input
  std::vector<uint8_t> want_codes(x.size()), want_scales(kBlocks);
  ASSERT_TRUE(cpu::QuantizeFp8(x, 32, want_codes, want_scales).ok());

  float* dx;
  uint8_t *dcodes, *dscales;
  ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dcodes, x.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dscales, kBlocks), cudaSuccess);
  cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
  cudaMemset(dcodes, 0xAB, x.size());  // Poison.
  cudaMemset(dscales, 0xAB, kBlocks);
  ASSERT_TRUE(QuantizeFp8({.x = dx, .codes = dcodes, .scales = dscales, .n = kBlocks * 32},
                          nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> codes(x.size()), scales(kBlocks);
  cudaMemcpy(codes.data(), dcodes, codes.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(scales.data(), dscales, scales.size(), cudaMemcpyDeviceToHost);
  int64_t code_mismatches = 0, scale_mismatches = 0;
  for (size_t i = 0; i < codes.size(); ++i) code_mismatches += codes[i] != want_codes[i];
  for (size_t i = 0; i < scales.size(); ++i) scale_mismatches += scales[i] != want_scales[i];
  EXPECT_EQ(code_mismatches, 0);
  EXPECT_EQ(scale_mismatches, 0);
  EXPECT_EQ(scales[5], 0xFF);
  EXPECT_EQ(scales[6], 0xFF);
  cudaFree(dx);
  cudaFree(dcodes);
  cudaFree(dscales);
}

TEST(QuantizeFp8CudaTest, RefusesUnsupportedShapes) {
  auto* p = reinterpret_cast<float*>(16);
  auto* b = reinterpret_cast<uint8_t*>(16);
  EXPECT_EQ(QuantizeFp8({.x = p, .codes = b, .scales = b, .n = 48}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeFp8({.x = p, .codes = b, .scales = b, .n = 64, .block = 128}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
