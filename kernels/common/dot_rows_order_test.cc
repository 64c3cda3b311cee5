// DotRowsElement against a lane-by-lane statement of DotRowsKernel
// (kernels/cuda/decode/dot_rows.cuh): 8 warps of 32 lanes, each lane's fma
// chain over its chunks, the shuffles of the xor butterfly as every lane sees
// them, then the warp sums in order. Bit for bit, with signed zeros,
// infinities (inf x 0 gives NaN), mixed magnitudes, and k from one lane's 4
// elements to several 1,024-element rounds.
#include "kernels/common/dot_rows_order.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::dot_rows_order {
namespace {

float KernelStatement(const std::vector<float>& x, const std::vector<float>& w, int64_t k) {
  float partial[kWarps];
  for (int warp = 0; warp < kWarps; ++warp) {
    float v[32];
    for (int lane = 0; lane < 32; ++lane) {
      float acc = 0.0f;
      for (int64_t c = warp * kChunk + 4 * lane; c < k; c += kWarps * kChunk) {
        for (int e = 0; e < 4; ++e) acc = std::fma(x[c + e], w[c + e], acc);
      }
      v[lane] = acc;
    }
    for (int m : {16, 8, 4, 2, 1}) {  // v += __shfl_xor_sync(v, m) in every lane
      float next[32];
      for (int lane = 0; lane < 32; ++lane) next[lane] = v[lane] + v[lane ^ m];
      std::memcpy(v, next, sizeof(v));
    }
    partial[warp] = v[0];
  }
  float s = partial[0];
  for (int q = 1; q < kWarps; ++q) s += partial[q];
  return s;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

template <int kLanes>
int64_t Mismatches(int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 9), exponent(-30, 30);
  int64_t bad = 0;
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<float> x(k), w(k);
    for (int64_t i = 0; i < k; ++i) {
      const int c = kind(rng);
      x[i] = c == 0 ? -0.0f : c == 1 ? 0.0f : std::ldexp(normal(rng), exponent(rng));
      w[i] = c == 2 ? -0.0f : c == 3 && trial % 5 == 0 ? INFINITY : normal(rng);
      if (trial % 7 == 0) x[i] = -0.0f;  // every product -0: the sums' sign is the test
    }
    const float want = KernelStatement(x, w, k);
    const float got = DotRowsElement<kLanes>(x.data(), w.data(), k);
    if (Bits(got) != Bits(want) && !(std::isnan(got) && std::isnan(want))) {
      ADD_FAILURE() << "k " << k << " trial " << trial << ": " << got << " vs " << want;
      if (++bad > 3) break;
    }
  }
  return bad;
}

TEST(DotRowsOrderTest, OneThreadGivesTheKernelsBits) {
  std::mt19937 rng(11);
  for (int64_t k : {4, 8, 12, 16}) EXPECT_EQ(Mismatches<4>(k, rng), 0) << k;
  for (int64_t k : {20, 32}) EXPECT_EQ(Mismatches<8>(k, rng), 0) << k;
  for (int64_t k : {48, 64}) EXPECT_EQ(Mismatches<16>(k, rng), 0) << k;
  for (int64_t k : {4, 68, 128, 132, 256, 1024, 1028, 2048, 4100}) {
    EXPECT_EQ(Mismatches<32>(k, rng), 0) << k;
  }
}

// A different order would show: the plain ascending sum differs somewhere.
TEST(DotRowsOrderTest, TheOrderIsNotTheAscendingSum) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int differ = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(300), w(300);
    for (int64_t i = 0; i < 300; ++i) {
      x[i] = std::ldexp(normal(rng), static_cast<int>(i % 17) - 8);
      w[i] = normal(rng);
    }
    float ascending = 0.0f;
    for (int64_t i = 0; i < 300; ++i) ascending = std::fma(x[i], w[i], ascending);
    differ += Bits(ascending) != Bits(DotRowsElement<32>(x.data(), w.data(), 300));
  }
  EXPECT_GT(differ, 20);
}

}  // namespace
}  // namespace weir::kernels::dot_rows_order
