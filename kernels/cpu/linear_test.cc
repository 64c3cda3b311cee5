// kernels/cpu/linear_test.cc

#include "kernels/cpu/linear.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/weight_quant.h"

namespace weir::kernels::cpu {
namespace {

std::vector<float> Random(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Plain double-precision y = x W^T, the oracle for the BLAS path.
std::vector<double> Naive(const std::vector<float>& x, const std::vector<float>& w, int64_t m,
                          int64_t n, int64_t k) {
  std::vector<double> y(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < k; ++c) y[i * n + j] += double(x[i * k + c]) * w[j * k + c];
    }
  }
  return y;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << i;
}

TEST(Linear, F32KnownValues) {
  std::vector<float> x = {1.0f, 2.0f, -1.0f, 0.5f};   // [2, 2]
  std::vector<float> w = {1, 0, 0, 1, 1, 1};          // [3, 2]
  std::vector<float> y(6);
  LinearWeight weight{.format = WeightFormat::kF32, .out_features = 3, .in_features = 2, .f32 = w};
  ASSERT_TRUE(Linear(weight, {.x = x, .y = y, .rows = 2}).ok());
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, -1, 0.5f, -0.5f}));
}

TEST(Linear, Bf16WeightsAndNoActivationQuant) {
  std::vector<uint16_t> w = {FloatToBf16Bits(1.5f), FloatToBf16Bits(-2.0f)};  // [1, 2]
  std::vector<float> x = {0.3f, 0.1f};  // not FP8-representable: must pass through as is
  std::vector<float> y(1);
  LinearWeight weight{.format = WeightFormat::kBf16, .out_features = 1, .in_features = 2, .bf16 = w};
  ASSERT_TRUE(Linear(weight, {.x = x, .y = y, .rows = 1}).ok());
  EXPECT_FLOAT_EQ(y[0], 1.5f * 0.3f - 2.0f * 0.1f);
}

TEST(Linear, Fp8WeightQuantizesTheActivationPer32) {
  // W = I (exact in FP8), so y is the FP8-quantized x: amax 1 -> s = 2^-8;
  // 0.3 / 2^-8 = 76.8 -> 80 (step 8) -> 0.3125.
  const int64_t k = 32;
  std::vector<float> eye(k * k, 0.0f);
  for (int i = 0; i < k; ++i) eye[i * k + i] = 1.0f;
  std::vector<uint8_t> codes(k * k), scales(1);
  ASSERT_TRUE(QuantizeFp8Weight(eye, k, k, 32, codes, scales).ok());
  LinearWeight weight{.format = WeightFormat::kFp8, .out_features = k, .in_features = k,
                      .data = codes, .scales = scales};
  std::vector<float> x(k, 0.0f), y(k);
  x[0] = 1.0f;
  x[1] = 0.3f;
  ASSERT_TRUE(Linear(weight, {.x = x, .y = y, .rows = 1}).ok());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.3125f);
  ASSERT_TRUE(Linear(weight, {.x = x, .y = y, .rows = 1, .act_quant = ActQuant::kNone}).ok());
  EXPECT_EQ(y[1], 0.3f);
}

TEST(Linear, Fp8MatchesNaiveOverSeveralRowTiles) {
  const int64_t m = 3, n = 300, k = 96;  // 300 rows -> two dequantization tiles
  std::vector<float> w = Random(n * k, 0.05f, 1), x = Random(m * k, 1.0f, 2);
  std::vector<uint8_t> codes(n * k), scales(Fp8WeightScaleCount(n, k, 32));
  ASSERT_TRUE(QuantizeFp8Weight(w, n, k, 32, codes, scales).ok());
  LinearWeight weight{.format = WeightFormat::kFp8, .out_features = n, .in_features = k,
                      .data = codes, .scales = scales};
  std::vector<float> wd(n * k);
  ASSERT_TRUE(DequantizeWeight(weight, wd).ok());
  std::vector<float> xq = x;
  ASSERT_TRUE(FakeQuantFp8(xq, 32).ok());
  std::vector<float> y(m * n);
  ASSERT_TRUE(Linear(weight, {.x = x, .y = y, .rows = m}).ok());
  ExpectClose(y, Naive(xq, wd, m, n, k), 1e-5);
  // A cached dequantized copy used as fp32 with kFp8 activations gives the same result.
  std::vector<float> y2(m * n);
  LinearWeight cached{.format = WeightFormat::kF32, .out_features = n, .in_features = k, .f32 = wd};
  ASSERT_TRUE(Linear(cached, {.x = x, .y = y2, .rows = m, .act_quant = ActQuant::kFp8}).ok());
  ExpectClose(y2, Naive(xq, wd, m, n, k), 1e-5);
}

TEST(Linear, Mxfp4MatchesNaive) {
  const int64_t m = 2, n = 40, k = 64;
  std::vector<float> w = Random(n * k, 0.1f, 3), x = Random(m * k, 1.0f, 4);
  std::vector<uint8_t> packed(n * k / 2), scales(n * k / 32);
  ASSERT_TRUE(QuantizeMxfp4Weight(w, n, k, packed, scales).ok());
  LinearWeight weight{.format = WeightFormat::kMxfp4, .out_features = n, .in_features = k,
                      .data = packed, .scales = scales};
  std::vector<float> wd(n * k);
  ASSERT_TRUE(DequantizeWeight(weight, wd).ok());
  for (size_t i = 0; i < wd.size(); ++i) ASSERT_LE(std::fabs(wd[i] - w[i]), 0.25f * 0.1f * 4);
  std::vector<float> xq = x;
  ASSERT_TRUE(FakeQuantFp8(xq, 32).ok());
  std::vector<float> y(m * n);
  ASSERT_TRUE(Linear(weight, {.x = x, .y = y, .rows = m}).ok());
  ExpectClose(y, Naive(xq, wd, m, n, k), 1e-5);
}

TEST(Linear, RejectsBadShapes) {
  std::vector<float> w(6), x(4), y(6);
  LinearWeight weight{.format = WeightFormat::kF32, .out_features = 3, .in_features = 2, .f32 = w};
  EXPECT_EQ(Linear(weight, {.x = x, .y = y, .rows = 3}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Linear(weight, {.x = x, .y = y, .rows = 2, .act_quant = ActQuant::kFp8}).code(),
            absl::StatusCode::kInvalidArgument);  // K = 2 is not a multiple of 32
  LinearWeight short_w{.format = WeightFormat::kF32, .out_features = 4, .in_features = 2, .f32 = w};
  EXPECT_EQ(Linear(short_w, {.x = x, .y = y, .rows = 2}).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> packed(24), scales(2);
  LinearWeight bad_fp4{.format = WeightFormat::kMxfp4, .out_features = 1, .in_features = 48,
                       .data = packed, .scales = scales};
  std::vector<float> x48(48), y1(1);
  EXPECT_EQ(Linear(bad_fp4, {.x = x48, .y = y1, .rows = 1}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cpu
