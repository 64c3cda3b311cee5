#include "kernels/cuda/cute/tile_transpose.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cuda {
namespace {

// Transposes a random matrix on the device and compares bit for bit with the
// host transpose; the output buffer is poisoned (NaN) first.
void ExpectTranspose(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::vector<float> in(rows * cols);
  for (float& v : in) v = dist(rng);
  float* d_in = nullptr;
  float* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, in.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, in.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemset(d_out, 0xFF, in.size() * sizeof(float)), cudaSuccess);
  ASSERT_TRUE(TileTransposeF32({.in = d_in, .out = d_out, .rows = rows, .cols = cols}, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> out(in.size());
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(std::memcmp(&out[c * rows + r], &in[r * cols + c], sizeof(float)), 0)
          << rows << "x" << cols << " at (" << r << ", " << c << ")";
    }
  }
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST(TileTransposeF32Test, MatchesHostTransposeOnFullAndEdgeTiles) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no usable CUDA device";
  ASSERT_GT(devices, 0);
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 1}, {32, 32}, {1, 1000}, {1000, 1}, {33, 31}, {257, 129}, {4096, 512}};
  uint32_t seed = 1;
  for (auto [rows, cols] : shapes) ExpectTranspose(rows, cols, seed++);
}

}  // namespace
}  // namespace weir::kernels::cuda
