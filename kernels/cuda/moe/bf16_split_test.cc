// GPU test of Bf16Split: each value's hi and lo bf16 bits as the host makes
// them (numeric_formats' nearest even), in both sides' layouts; one bf16 GEMM
// over the two sides' splits within its stated bound of the exact fp32
// product; bad arguments.

#include "kernels/cuda/moe/bf16_split.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cuda/dense/bf16_gemm_sm90.h"
#include "kernels/cuda/moe/test_util.h"

namespace weir::kernels::cuda {
namespace {

using moe_test::DeviceBuffer;
using moe_test::Synced;

// Random values of magnitudes 2^-20 .. 2^20 and the edges: zeros of both
// signs, a subnormal, bf16 values (lo 0), halfway cases.
std::vector<float> Values(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> v(n);
  for (float& f : v) f = std::ldexp(normal(rng), exponent(rng));
  const float edges[] = {0.0f, -0.0f, 1e-40f, 1.0f, -3.5f, 1.00390625f, 65504.0f, -1.0e30f};
  for (size_t i = 0; i < std::size(edges) && i < v.size(); ++i) v[i] = edges[i];
  return v;
}

TEST(Bf16SplitTest, HiAndLoAreTheHostsNearestEvenParts) {
  std::mt19937 rng(7);
  const int64_t rows = 37, cols = 200;
  const std::vector<float> x = Values(rows * cols, rng);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint16_t> out(rows * 3 * cols);
  ASSERT_TRUE(dx.ok() && out.ok());
  for (const bool weight_side : {false, true}) {
    out.Poison();
    ASSERT_TRUE(Bf16Split({.x = dx.get(),
                           .out = out.get(),
                           .rows = rows,
                           .cols = cols,
                           .weight_side = weight_side},
                          nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
    const std::vector<uint16_t> got = out.Download();
    int64_t differ = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = x[r * cols + c];
        const uint16_t hi = FloatToBf16Bits(v);
        const uint16_t lo = FloatToBf16Bits(v - Bf16BitsToFloat(hi));
        const uint16_t* row = got.data() + r * 3 * cols;
        differ += row[c] != hi;
        differ += row[cols + c] != (weight_side ? lo : hi);
        differ += row[2 * cols + c] != (weight_side ? hi : lo);
      }
    }
    EXPECT_EQ(differ, 0) << "weight side " << weight_side;
  }
}

// X' [m, 3k] (activations' side) times W' [n, 3k]^T (weights' side) on
// Bf16Gemm: each logit within 2^-14 sum |x w| of the exact product (the
// dropped lo.lo and lo's rounding are about 2^-16 a product; fp32 sums add
// k 2^-24).
TEST(Bf16SplitTest, OneBf16GemmOverTheSplitsIsCloseToTheFp32Product) {
  std::mt19937 rng(11);
  const int64_t m = 70, n = 48, k = 512;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(m * k), w(n * k);
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = 0.02f * normal(rng);
  DeviceBuffer<float> dx(x), dw(w), y(m * n);
  DeviceBuffer<uint16_t> xs(m * 3 * k), ws(n * 3 * k);
  ASSERT_TRUE(dx.ok() && dw.ok() && y.ok() && xs.ok() && ws.ok());
  ASSERT_TRUE(Bf16Split({.x = dx.get(), .out = xs.get(), .rows = m, .cols = k}, nullptr).ok());
  ASSERT_TRUE(Bf16Split({.x = dw.get(), .out = ws.get(), .rows = n, .cols = k, .weight_side = true},
                        nullptr)
                  .ok());
  ASSERT_TRUE(dense::Bf16Gemm(
                  {.x = xs.get(), .w = ws.get(), .y = y.get(), .m = m, .n = n, .k = 3 * k}, nullptr)
                  .ok());
  ASSERT_TRUE(Synced());
  const std::vector<float> got = y.Download();
  int64_t outside = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0.0, mag = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        exact += static_cast<double>(x[i * k + c]) * w[j * k + c];
        mag += std::fabs(static_cast<double>(x[i * k + c]) * w[j * k + c]);
      }
      const double err = std::fabs(got[i * n + j] - exact) / mag;
      worst = std::max(worst, err);
      outside += err > std::ldexp(1.0, -14);
    }
  }
  EXPECT_EQ(outside, 0) << "worst " << worst;
  std::printf("bf16 split product: worst error %.3g of sum |x w| (bound 2^-14 = %.3g)\n", worst,
              std::ldexp(1.0, -14));
}

TEST(Bf16SplitTest, RefusesBadArguments) {
  DeviceBuffer<float> x(8);
  DeviceBuffer<uint16_t> out(24);
  ASSERT_TRUE(x.ok() && out.ok());
  EXPECT_EQ(Bf16Split({.x = nullptr, .out = out.get(), .rows = 1, .cols = 8}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Bf16Split({.x = x.get(), .out = nullptr, .rows = 1, .cols = 8}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Bf16Split({.x = x.get(), .out = out.get(), .rows = 0, .cols = 8}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Bf16Split({.x = x.get(), .out = out.get(), .rows = 1, .cols = -1}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Bf16Split({.x = x.get(), .out = out.get(), .rows = 1, .cols = 8}, nullptr).ok());
  EXPECT_TRUE(Synced());
}

}  // namespace
}  // namespace weir::kernels::cuda
