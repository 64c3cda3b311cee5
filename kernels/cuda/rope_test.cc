#include "kernels/cuda/rope.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/rope.h"

namespace weir::kernels::cuda {
namespace {

TEST(RopeCudaTest, MatchesTheCpuReferenceForwardAndInverse) {
  // The two V4.1 layer types: plain RoPE (theta 1e4) and YaRN (theta 1.6e5, x16 over 64k).
  const cpu::RopeConfig configs[] = {
      {.rope_dim = 64, .theta = 10000.0f},
      {.rope_dim = 64, .theta = 160000.0f, .original_seq_len = 65536, .factor = 16.0f}};
  for (const cpu::RopeConfig& config : configs) {
    absl::StatusOr<cpu::RopeTable> table = cpu::RopeTable::Create(config);
    ASSERT_TRUE(table.ok());
    const int64_t tokens = 300;
    const int heads = 8, head_dim = 512;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int64_t> pos_dist(0, 1 << 20);
    std::vector<float> x(tokens * heads * head_dim);
    for (float& v : x) v = normal(rng);
    std::vector<int64_t> positions(tokens);
    for (int64_t& p : positions) p = pos_dist(rng);
    positions[0] = 0;
    for (bool inverse : {false, true}) {
      std::vector<float> want = x;
      ASSERT_TRUE(cpu::ApplyRope(*table, {.x = want, .positions = positions,
                                          .num_tokens = tokens, .num_heads = heads,
                                          .head_dim = head_dim,
                                          .direction = inverse ? cpu::RopeDirection::kInverse
                                                               : cpu::RopeDirection::kForward})
                      .ok());
      float *dx, *dfreqs;
      int64_t* dpos;
      cudaMalloc(&dx, x.size() * 4);
      cudaMalloc(&dfreqs, table->freqs().size() * 4);
      cudaMalloc(&dpos, positions.size() * 8);
      cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dfreqs, table->freqs().data(), table->freqs().size() * 4,
                 cudaMemcpyHostToDevice);
      cudaMemcpy(dpos, positions.data(), positions.size() * 8, cudaMemcpyHostToDevice);
      ASSERT_TRUE(ApplyRope({.x = dx, .positions = dpos, .freqs = dfreqs, .num_tokens = tokens,
                             .num_heads = heads, .head_dim = head_dim, .inverse = inverse},
                            nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> got(x.size());
      cudaMemcpy(got.data(), dx, got.size() * 4, cudaMemcpyDeviceToHost);
      double num = 0, den = 0;
      int64_t untouched_mismatch = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += double(want[i]) * want[i];
        if (static_cast<int64_t>(i % head_dim) < head_dim - 64 && got[i] != x[i]) {
          ++untouched_mismatch;
        }
      }
      // cosf/sinf differ from libm by an ulp or two; the rest is bit-exact.
      EXPECT_LT(std::sqrt(num / den), 1e-6) << "inverse " << inverse;
      EXPECT_EQ(untouched_mismatch, 0);  // Only the last rope_dim dims rotate.
      // With the CPU's cos/sin table (cpu::RopeCosSin): bit-identical.
      std::vector<float> cos_sin(tokens * config.rope_dim);
      ASSERT_TRUE(cpu::RopeCosSin(*table, positions, cos_sin).ok());
      float* dcs;
      cudaMalloc(&dcs, cos_sin.size() * 4);
      cudaMemcpy(dcs, cos_sin.data(), cos_sin.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
      ASSERT_TRUE(ApplyRope({.x = dx, .positions = dpos, .cos_sin = dcs, .num_tokens = tokens,
                             .num_heads = heads, .head_dim = head_dim, .inverse = inverse},
                            nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaMemcpy(got.data(), dx, got.size() * 4, cudaMemcpyDeviceToHost);
      int64_t mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        mismatches += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
      }
      EXPECT_EQ(mismatches, 0) << "inverse " << inverse << " with the CPU's cos/sin";
      cudaFree(dcs);
      cudaFree(dx);
      cudaFree(dfreqs);
      cudaFree(dpos);
    }
  }
}

TEST(RopeCudaTest, RefusesWhatItDoesNotSupport) {
  auto* f = reinterpret_cast<float*>(16);
  auto* p = reinterpret_cast<int64_t*>(16);
  EXPECT_EQ(ApplyRope({.x = f, .positions = p, .freqs = f, .num_tokens = 1, .num_heads = 1,
                       .head_dim = 32, .rope_dim = 64},
                      nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SupportsRope({.x = f, .positions = p, .freqs = f, .num_tokens = 1,
                             .num_heads = 1, .head_dim = 64, .rope_dim = 63}));
}

}  // namespace
}  // namespace weir::kernels::cuda
