// kernels/cpu/weight_quant_test.cc

#include "kernels/cpu/weight_quant.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"

namespace weir::kernels::cpu {
namespace {

TEST(Fp8Weight, TileScalesIncludingPartialEdgeTiles) {
  // [3, 5] with 2x2 tiles: scales [2, 3]; every code is 1.0, so out = tile scale.
  const int64_t rows = 3, cols = 5;
  std::vector<uint8_t> codes(rows * cols, 0x38);
  std::vector<uint8_t> scales = {127, 128, 129,   // tile rows 0-1
                                 126, 130, 120};  // tile row 2 (partial)
  ASSERT_EQ(Fp8WeightScaleCount(rows, cols, 2), 6);
  std::vector<float> out(rows * cols);
  ASSERT_TRUE(DequantizeFp8Weight(codes, scales, rows, cols, 2, out).ok());
  const float expect[3][5] = {{1, 1, 2, 2, 4}, {1, 1, 2, 2, 4}, {0.5f, 0.5f, 8, 8, 0.0078125f}};
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) EXPECT_EQ(out[r * cols + c], expect[r][c]) << r << "," << c;
  }
}

TEST(Fp8Weight, QuantizeRoundTripAndTileIndependence) {
  const int64_t rows = 70, cols = 40;  // partial tiles on both edges with block 32
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(rows * cols);
  for (float& v : w) v = normal(rng);
  w[0] = 448.0f;  // tile (0,0) gets scale 1; other tiles must not notice
  const int64_t n_scales = Fp8WeightScaleCount(rows, cols, 32);
  std::vector<uint8_t> codes(w.size()), scales(n_scales);
  ASSERT_TRUE(QuantizeFp8Weight(w, rows, cols, 32, codes, scales).ok());
  EXPECT_EQ(scales[0], 127);
  std::vector<float> out(w.size());
  ASSERT_TRUE(DequantizeFp8Weight(codes, scales, rows, cols, 32, out).ok());
  EXPECT_EQ(out[0], 448.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float x = w[r * cols + c];
      const float s = E8m0ToFloat(scales[(r / 32) * 2 + c / 32]);
      ASSERT_LE(std::fabs(out[r * cols + c] - x), std::fabs(x) / 16 + s * std::ldexp(1.0f, -10));
      if (r >= 32 || c >= 32) {
        ASSERT_LT(s, 0.001f);  // small-valued tiles keep fine scales
      }
    }
  }
  // Re-quantizing the dequantized weight reproduces the same bytes.
  std::vector<uint8_t> codes2(w.size()), scales2(n_scales);
  ASSERT_TRUE(QuantizeFp8Weight(out, rows, cols, 32, codes2, scales2).ok());
  std::vector<float> out2(w.size());
  ASSERT_TRUE(DequantizeFp8Weight(codes2, scales2, rows, cols, 32, out2).ok());
  EXPECT_EQ(out, out2);
}

TEST(Fp8Weight, RejectsBadShapes) {
  std::vector<uint8_t> codes(6), scales(1);
  std::vector<float> out(6);
  EXPECT_EQ(DequantizeFp8Weight(codes, scales, 0, 6, 32, out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeFp8Weight(codes, scales, 2, 3, 1, out).code(),
            absl::StatusCode::kInvalidArgument);  // needs 6 scales
  EXPECT_TRUE(DequantizeFp8Weight(codes, scales, 2, 3, 32, out).ok());
}

TEST(Mxfp4Weight, PerRowPer32Scales) {
  const int64_t rows = 2, cols = 64;
  std::vector<float> w(rows * cols, 0.0f);
  w[0] = 6.0f;           // row 0, block 0: s = 1
  w[1] = -3.0f;
  w[32] = 0.75f;         // row 0, block 1: amax .75 -> s = 2^-3; .75/.125 = 6
  w[64 + 5] = 12.0f;     // row 1, block 0: s = 2
  std::vector<uint8_t> packed(rows * cols / 2), scales(rows * cols / 32);
  ASSERT_TRUE(QuantizeMxfp4Weight(w, rows, cols, packed, scales).ok());
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(scales[1], 124);
  EXPECT_EQ(scales[2], 128);
  EXPECT_EQ(packed[0], 0xD7);  // 6 -> 0x7 low, -3 -> 0xD high
  std::vector<float> out(w.size());
  ASSERT_TRUE(DequantizeMxfp4Weight(packed, scales, rows, cols, out).ok());
  EXPECT_EQ(out, w);  // every value here is exactly representable
  std::vector<float> bad(2 * 48);
  std::vector<uint8_t> p48(48), s48(3);
  EXPECT_EQ(QuantizeMxfp4Weight(bad, 2, 48, p48, s48).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cpu
