#include "kernels/cuda/rope.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/device_buffer.h"

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

using testing::DeviceBuffer;

int64_t BitMismatches(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(a.size() + b.size());
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// The decode step uploads one cos/sin table for positions 0 .. rows - 1 and
// indexes it by each token's position on the device: the result must be the
// per-token mode's and the CPU's, bit for bit.
TEST(RopeCudaTest, ATableByPositionIsBitIdenticalToPerTokenValuesAndTheCpu) {
  const cpu::RopeConfig configs[] = {
      {.rope_dim = 64, .theta = 10000.0f},
      {.rope_dim = 64, .theta = 160000.0f, .original_seq_len = 65536, .factor = 16.0f}};
  struct Shape {
    int64_t tokens;
    int heads, head_dim;
  };
  const Shape shapes[] = {{1, 1, 64}, {37, 3, 96}, {200, 8, 512}};
  constexpr int64_t kTableRows = 5000;
  std::vector<int64_t> table_positions(kTableRows);
  for (int64_t p = 0; p < kTableRows; ++p) table_positions[p] = p;
  uint32_t seed = 21;
  for (const cpu::RopeConfig& config : configs) {
    absl::StatusOr<cpu::RopeTable> table = cpu::RopeTable::Create(config);
    ASSERT_TRUE(table.ok());
    std::vector<float> table_values(kTableRows * config.rope_dim);
    ASSERT_TRUE(cpu::RopeCosSin(*table, table_positions, table_values).ok());
    DeviceBuffer<float> dtable(table_values);
    ASSERT_TRUE(dtable.ok());
    for (const Shape& shape : shapes) {
      std::mt19937 rng(seed++);
      std::normal_distribution<float> normal;
      std::uniform_int_distribution<int64_t> pos_dist(0, kTableRows - 1);
      std::vector<float> x(shape.tokens * shape.heads * shape.head_dim);
      for (float& v : x) v = normal(rng);
      std::vector<int64_t> positions(shape.tokens);
      for (int64_t& p : positions) p = pos_dist(rng);
      positions[0] = shape.tokens > 1 ? 0 : kTableRows - 1;  // both ends of the table
      if (shape.tokens > 2) positions[2] = positions[1];     // a repeated position
      if (shape.tokens > 3) positions[3] = kTableRows - 1;
      std::vector<float> per_token(shape.tokens * config.rope_dim);
      ASSERT_TRUE(cpu::RopeCosSin(*table, positions, per_token).ok());
      DeviceBuffer<float> dper_token(per_token);
      DeviceBuffer<int64_t> dpos(positions);
      ASSERT_TRUE(dper_token.ok() && dpos.ok());
      for (bool inverse : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "theta " << config.theta << " tokens "
                                          << shape.tokens << " heads " << shape.heads
                                          << " head_dim " << shape.head_dim << " inverse "
                                          << inverse);
        // The CPU's rotation of `v` in place.
        auto cpu_rope = [&](std::vector<float>& v) {
          return cpu::ApplyRope(*table, {.x = v,
                                         .positions = positions,
                                         .num_tokens = shape.tokens,
                                         .num_heads = shape.heads,
                                         .head_dim = shape.head_dim,
                                         .direction = inverse ? cpu::RopeDirection::kInverse
                                                              : cpu::RopeDirection::kForward});
        };
        std::vector<float> want = x;
        ASSERT_TRUE(cpu_rope(want).ok());
        DeviceBuffer<float> by_token(x), by_position(x);
        ASSERT_TRUE(by_token.ok() && by_position.ok());
        const RopeParams base{.x = by_token.get(), .positions = dpos.get(),
                              .cos_sin = dper_token.get(), .num_tokens = shape.tokens,
                              .num_heads = shape.heads, .head_dim = shape.head_dim,
                              .inverse = inverse};
        ASSERT_TRUE(ApplyRope(base, nullptr).ok());
        RopeParams indexed = base;
        indexed.x = by_position.get();
        indexed.cos_sin = dtable.get();
        indexed.cos_sin_by_position = true;
        indexed.cos_sin_rows = kTableRows;
        ASSERT_TRUE(SupportsRope(indexed));
        ASSERT_TRUE(ApplyRope(indexed, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<float> got_token = by_token.Download();
        const std::vector<float> got_position = by_position.Download();
        const int64_t vs_token = BitMismatches(got_position, got_token);
        const int64_t vs_cpu = BitMismatches(got_position, want);
        EXPECT_EQ(vs_token, 0) << "by position vs by token";
        EXPECT_EQ(vs_cpu, 0) << "by position vs the CPU";
        EXPECT_EQ(BitMismatches(got_token, want), 0) << "by token vs the CPU";
        // round_bf16 on an x already rounded: the bits of a RoundBf16 pass
        // over the whole of x after the rotation.
        std::vector<float> x_bf16 = x;
        for (float& v : x_bf16) v = kernels::RoundToBf16(v);
        std::vector<float> want_bf16 = x_bf16;
        ASSERT_TRUE(cpu_rope(want_bf16).ok());
        for (float& v : want_bf16) v = kernels::RoundToBf16(v);
        DeviceBuffer<float> rounded(x_bf16);
        ASSERT_TRUE(rounded.ok());
        RopeParams fused = indexed;
        fused.x = rounded.get();
        fused.round_bf16 = true;
        ASSERT_TRUE(ApplyRope(fused, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(BitMismatches(rounded.Download(), want_bf16), 0) << "rounded to bf16";
        std::printf("rope by position, theta %g tokens %lld heads %d head_dim %d inverse %d: "
                    "%lld / %lld bit mismatches vs per-token / CPU\n",
                    config.theta, static_cast<long long>(shape.tokens), shape.heads,
                    shape.head_dim, inverse, static_cast<long long>(vs_token),
                    static_cast<long long>(vs_cpu));
      }
    }
  }
}

// A position outside the table cannot be refused on the host: that token's
// rotated dims become NaN; its other dims and the other tokens are unchanged.
TEST(RopeCudaTest, APositionOutsideTheTableGivesNaNForThatTokenOnly) {
  absl::StatusOr<cpu::RopeTable> table = cpu::RopeTable::Create({.rope_dim = 64});
  ASSERT_TRUE(table.ok());
  constexpr int64_t kRows = 100, kTokens = 4;
  constexpr int kHeads = 2, kHeadDim = 128;
  std::vector<int64_t> table_positions(kRows);
  for (int64_t p = 0; p < kRows; ++p) table_positions[p] = p;
  std::vector<float> table_values(kRows * 64);
  ASSERT_TRUE(cpu::RopeCosSin(*table, table_positions, table_values).ok());
  // Tokens 1 and 3 are past either end of the table.
  const std::vector<int64_t> positions = {7, kRows, 99, -1};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(kTokens * kHeads * kHeadDim);
  for (float& v : x) v = normal(rng);
  std::vector<float> want = x;
  const std::vector<int64_t> valid = {7, 0, 99, 0};  // placeholders for tokens 1 and 3
  ASSERT_TRUE(cpu::ApplyRope(*table, {.x = want, .positions = valid, .num_tokens = kTokens,
                                      .num_heads = kHeads, .head_dim = kHeadDim})
                  .ok());
  DeviceBuffer<float> dx(x), dtable(table_values);
  DeviceBuffer<int64_t> dpos(positions);
  ASSERT_TRUE(dx.ok() && dtable.ok() && dpos.ok());
  ASSERT_TRUE(ApplyRope({.x = dx.get(), .positions = dpos.get(), .cos_sin = dtable.get(),
                         .num_tokens = kTokens, .num_heads = kHeads, .head_dim = kHeadDim,
                         .cos_sin_by_position = true, .cos_sin_rows = kRows},
                        nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> got = dx.Download();
  ASSERT_EQ(got.size(), x.size());
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t token = static_cast<int64_t>(i) / (kHeads * kHeadDim);
    const bool rotated = static_cast<int64_t>(i % kHeadDim) >= kHeadDim - 64;
    const bool bad_token = token == 1 || token == 3;
    if (bad_token && rotated) {
      wrong += !std::isnan(got[i]);
    } else if (bad_token) {
      wrong += std::memcmp(&got[i], &x[i], sizeof(float)) != 0;
    } else {
      wrong += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
    }
  }
  EXPECT_EQ(wrong, 0);
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
  // By position: the table and its row count are required (freqs do not do).
  const RopeParams table{.x = f, .positions = p, .cos_sin = f, .num_tokens = 1,
                         .num_heads = 1, .head_dim = 64, .cos_sin_by_position = true,
                         .cos_sin_rows = 10};
  EXPECT_TRUE(SupportsRope(table));
  RopeParams bad = table;
  bad.cos_sin_rows = 0;
  EXPECT_EQ(ApplyRope(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = table;
  bad.cos_sin = nullptr;
  bad.freqs = f;
  EXPECT_EQ(ApplyRope(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = table;
  bad.cos_sin_rows = -5;
  EXPECT_FALSE(SupportsRope(bad));
}

}  // namespace
}  // namespace weir::kernels::cuda
