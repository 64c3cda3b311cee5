// kernels/cpu/rms_norm_test.cc

#include "kernels/cpu/rms_norm.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cpu {
namespace {

TEST(RmsNorm, KnownValues) {
  // Row 0: (3, 4): mean square 12.5, r = 1/sqrt(12.5). Row 1: (1, 1) -> (1, 1) * w.
  std::vector<float> x = {3.0f, 4.0f, 1.0f, 1.0f};
  std::vector<float> w = {2.0f, 0.5f};
  std::vector<float> y(4);
  ASSERT_TRUE(RmsNorm({.x = x, .weight = w, .out = y, .rows = 2, .dim = 2}).ok());
  const float r = 1.0f / std::sqrt(12.5f);
  EXPECT_FLOAT_EQ(y[0], 2.0f * 3.0f * r);
  EXPECT_FLOAT_EQ(y[1], 0.5f * 4.0f * r);
  EXPECT_EQ(y[2], 2.0f);
  EXPECT_EQ(y[3], 0.5f);
}

TEST(RmsNorm, UnitRmsWithoutWeightAndScaleInvariance) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = std::sin(0.37f * i) * 1e-3f;
  std::vector<float> scaled(64);
  for (int i = 0; i < 64; ++i) scaled[i] = x[i] * 1024.0f;  // exact power-of-two scaling
  std::vector<float> y(64), z(64);
  ASSERT_TRUE(RmsNorm({.x = x, .out = y, .rows = 1, .dim = 64}).ok());
  ASSERT_TRUE(RmsNorm({.x = scaled, .out = z, .rows = 1, .dim = 64}).ok());
  double ms = 0;
  for (float v : y) ms += double(v) * v;
  EXPECT_NEAR(ms / 64, 1.0, 1e-6);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(y[i], z[i], 1e-6f) << i;
}

TEST(RmsNorm, TinyEpsKeepsSmallRowsAndZeroRowIsZero) {
  // With eps 1e-20 a row of 1e-8 is still normalized to unit RMS (eps 1e-6
  // would dominate it): this is why V4.1's eps matters.
  std::vector<float> x(4, 1e-8f), y(4);
  ASSERT_TRUE(RmsNorm({.x = x, .out = y, .rows = 1, .dim = 4}).ok());
  // var 1e-16 against eps 1e-20: y = 1 / sqrt(1 + 1e-4).
  for (float v : y) EXPECT_NEAR(v, 1.0 / std::sqrt(1.0 + 1e-4), 1e-6);
  ASSERT_TRUE(RmsNorm({.x = x, .out = y, .rows = 1, .dim = 4, .eps = 1e-6f}).ok());
  for (float v : y) EXPECT_LT(v, 0.02f);
  std::vector<float> zero(4, 0.0f);
  ASSERT_TRUE(RmsNorm({.x = zero, .out = y, .rows = 1, .dim = 4}).ok());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(RmsNorm, InPlaceAndBadArgs) {
  std::vector<float> x = {3.0f, 4.0f};
  ASSERT_TRUE(RmsNorm({.x = x, .out = x, .rows = 1, .dim = 2}).ok());
  EXPECT_FLOAT_EQ(x[0] * x[0] + x[1] * x[1], 2.0f);
  std::vector<float> y(3);
  EXPECT_EQ(RmsNorm({.x = x, .out = y, .rows = 1, .dim = 2}).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> w(3);
  EXPECT_EQ(RmsNorm({.x = x, .weight = w, .out = x, .rows = 1, .dim = 2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNorm({.x = x, .out = x, .rows = 0, .dim = 2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNorm({.x = x, .out = x, .rows = 1, .dim = 2, .eps = -1.0f}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cpu
